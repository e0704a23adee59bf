/**
 * Upper bounds for numbers taken from query strings. An unbounded integer schema let `?offset=1e308`
 * through to Prisma, whose refusal surfaced as a 500; with these bounds the schema answers
 * 400 VALIDATION_ERROR before the handler runs.
 */

/** The largest Int column value, and the largest page offset Prisma's `skip` and SQL OFFSET take here. */
export const MAX_INT32 = 2_147_483_647;

/** A sequence number from a BigInt column, read as a JavaScript number: exact up to 2^53 - 1. */
export const MAX_SEQUENCE = Number.MAX_SAFE_INTEGER;
