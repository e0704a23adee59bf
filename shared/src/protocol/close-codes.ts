/**
 * WebSocket close codes (4000-4999 are the application's). A refusal message always precedes a close
 * with one of these, so the reason travels in full; the close reason is only a 123-byte summary.
 */
export const CLOSE_CODES = {
  /** The peer refused and redialling will not help (bad token, revoked credential, version). */
  refusedFatal: 4001,
  /** The peer refused for now (already connected, shutting down); redial with backoff. */
  refusedRetry: 4002,
  /** A frame could not be decoded. */
  badFrame: 4003,
  /** Heartbeats stopped arriving. */
  heartbeatTimeout: 4004,
  /** A newer connection of the same host replaced this one. */
  replaced: 4005,
} as const;

/** Truncate a close reason to the 123 bytes WebSocket allows. */
export function closeReason(text: string): string {
  let out = text;
  while (Buffer.byteLength(out) > 123) out = out.slice(0, -1);
  return out;
}
