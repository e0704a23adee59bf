export type SortDirection = 'asc' | 'desc';

/**
 * The orderBy of a list route sorted by `name`, `updated_at` or `created_at` (the default), or by a key of
 * `others` (a sort a route adds, as Prisma takes it), then by id in the same direction: rows with equal
 * keys keep one order, so offset pages never repeat or skip a row.
 */
export function listOrderBy<Extra extends object = never>(
  sort: string | undefined,
  direction: SortDirection,
  others: Readonly<Record<string, Extra>> = {},
) {
  const extra = sort !== undefined && Object.hasOwn(others, sort) ? others[sort] : undefined;
  const primary =
    sort === 'name'
      ? { name: direction }
      : sort === 'updated_at'
        ? { updatedAt: direction }
        : (extra ?? { createdAt: direction });
  return [primary, { id: direction }];
}
