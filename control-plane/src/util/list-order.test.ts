import { describe, expect, it } from 'vitest';
import { listOrderBy } from './list-order.ts';

describe('listOrderBy', () => {
  it.each([
    ['name', 'asc', { name: 'asc' }],
    ['updated_at', 'desc', { updatedAt: 'desc' }],
    ['created_at', 'asc', { createdAt: 'asc' }],
    [undefined, 'desc', { createdAt: 'desc' }],
  ] as const)('sorts by %s %s, then by id the same way', (sort, direction, primary) => {
    expect(listOrderBy(sort, direction)).toEqual([primary, { id: direction }]);
  });

  it("takes a route's own sorts, and falls back to created_at for a key it does not know", () => {
    const size = { sizeBytes: { sort: 'asc', nulls: 'last' } } as const;
    expect(listOrderBy('size', 'asc', { size })).toEqual([size, { id: 'asc' }]);
    expect(listOrderBy('toString', 'asc', { size })).toEqual([{ createdAt: 'asc' }, { id: 'asc' }]);
  });
});
