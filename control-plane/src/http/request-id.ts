import type { IncomingMessage } from 'node:http';
import { randomBase36 } from '@anvil/shared';

const ACCEPTED = /^[A-Za-z0-9._:-]{1,128}$/;

/** Uses the caller's X-Request-Id when it is a sane token (so traces join up), else makes one. */
export function requestIdFor(request: IncomingMessage): string {
  const given = request.headers['x-request-id'];
  if (typeof given === 'string' && ACCEPTED.test(given)) return given;
  return `req_${randomBase36(20)}`;
}
