import { describe, expect, it } from 'vitest';
import { Demuxer, LineSplitter, normaliseTimestamp, parseTimedLine, timestampSeconds } from './parse.ts';

function frame(stream: 1 | 2, text: string | Buffer): Buffer {
  const payload = Buffer.isBuffer(text) ? text : Buffer.from(text);
  const header = Buffer.alloc(8);
  header[0] = stream;
  header.writeUInt32BE(payload.length, 4);
  return Buffer.concat([header, payload]);
}

describe('log parsing', () => {
  it('pads Docker timestamps to nanoseconds so they sort as strings', () => {
    expect(normaliseTimestamp('2024-05-01T10:00:05.12Z')).toBe('2024-05-01T10:00:05.120000000Z');
    expect(normaliseTimestamp('2024-05-01T10:00:05Z')).toBe('2024-05-01T10:00:05.000000000Z');
    expect(normaliseTimestamp('2024-05-01T10:00:05.123456789Z')).toBe('2024-05-01T10:00:05.123456789Z');
    expect(normaliseTimestamp('yesterday')).toBeNull();
    const a = normaliseTimestamp('2024-05-01T10:00:05.9Z')!;
    const b = normaliseTimestamp('2024-05-01T10:00:05.10Z')!;
    expect(a > b).toBe(true);
    expect(timestampSeconds(a)).toBe(Date.parse('2024-05-01T10:00:05Z') / 1000);
  });

  it('splits the stamp from the line, keeping spaces in the line', () => {
    expect(parseTimedLine('2024-05-01T10:00:05.1Z  two spaces', () => 'x')).toEqual({
      ts: '2024-05-01T10:00:05.100000000Z',
      line: ' two spaces',
    });
    expect(parseTimedLine('no stamp here', () => 'fallback')).toEqual({
      ts: 'fallback',
      line: 'no stamp here',
    });
  });

  it('keeps partial lines and split UTF-8 characters until they complete', () => {
    const splitter = new LineSplitter();
    const euro = Buffer.from('€');
    expect(splitter.push(Buffer.concat([Buffer.from('a\nb'), euro.subarray(0, 1)]))).toEqual(['a']);
    expect(splitter.push(Buffer.concat([euro.subarray(1), Buffer.from('c\r\nlast')]))).toEqual(['b€c']);
    expect(splitter.end()).toEqual(['last']);
  });

  it('demultiplexes frames split anywhere, in order', () => {
    const bytes = Buffer.concat([frame(1, 'out1\n'), frame(2, 'err1\n'), frame(1, 'out2\n')]);
    const demuxer = new Demuxer();
    const frames = [
      ...demuxer.push(bytes.subarray(0, 3)),
      ...demuxer.push(bytes.subarray(3, 17)),
      ...demuxer.push(bytes.subarray(17)),
    ];
    expect(frames.map((f) => [f.stream, f.payload.toString()])).toEqual([
      ['stdout', 'out1\n'],
      ['stderr', 'err1\n'],
      ['stdout', 'out2\n'],
    ]);
  });
});
