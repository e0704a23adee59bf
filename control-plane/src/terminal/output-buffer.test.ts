import { describe, expect, it } from 'vitest';
import { OutputBuffer } from './output-buffer.ts';

describe('OutputBuffer', () => {
  it('numbers bytes by offset and replays from any offset it still holds', () => {
    const buffer = new OutputBuffer(10);
    expect(buffer.append(Buffer.from('abcd'))).toBe(0);
    expect(buffer.append(Buffer.from('efg'))).toBe(4);
    expect(buffer.since(2)).toEqual({ seq: 2, data: Buffer.from('cdefg') });
    expect(buffer.since(7)).toEqual({ seq: 7, data: Buffer.alloc(0) });
    expect(buffer.end).toBe(7);
  });

  it('keeps only the newest bytes; older offsets start at the oldest byte held', () => {
    const buffer = new OutputBuffer(5);
    buffer.append(Buffer.from('0123'));
    buffer.append(Buffer.from('4567'));
    expect(buffer.start).toBe(3);
    expect(buffer.end).toBe(8);
    expect(buffer.since(0)).toEqual({ seq: 3, data: Buffer.from('34567') });
    buffer.append(Buffer.from('89abcdef'));
    expect(buffer.since(0)).toEqual({ seq: 11, data: Buffer.from('bcdef') });
  });
});
