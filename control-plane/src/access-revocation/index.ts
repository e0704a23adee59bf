export type { SessionGrant, Verdict } from './access-check.ts';
export { SessionAccessCheck, VERDICT_CACHE_MS } from './access-check.ts';
export type { HeldSession, SessionKind, SessionLimits } from './live-sessions.ts';
export { LiveSessions, overLimit, SESSION_KINDS } from './live-sessions.ts';
export type { Revocation, RevocationListener, RevocationReason } from './revocations.ts';
export { AccessRevocations, REVOCATION_CHANNEL } from './revocations.ts';
