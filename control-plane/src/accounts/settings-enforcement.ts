/**
 * Settings fields that act, keyed by dotted path (a path covers every field under it), each with the
 * title (or a distinctive part of it) of the test proving its effect.
 */
export const ENFORCED_SETTINGS: Record<string, string> = {
  'security.two_factor': 'two-factor',
};
