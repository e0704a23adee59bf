/**
 * Settings fields that act, keyed by dotted path (a path covers every field under it), each with the
 * title (or a distinctive part of it) of the test proving its effect. Every other field of the settings
 * schema is refused (settings-refused.ts). The table test (settings-enforcement.test.ts) walks the schema
 * and fails on a field in neither list, in both, or whose test cannot be found: a new field must act, and
 * be proven, or be refused.
 */
export const ENFORCED_SETTINGS: Record<string, string> = {
  'notifications.email.enabled': 'records a crossed threshold once and notifies webhook, chat and e-mail',
  'notifications.email.alerts.cost_alerts':
    'records a crossed threshold once and notifies webhook, chat and e-mail',
  'notifications.email.email': 'records a crossed threshold once and notifies webhook, chat and e-mail',
  'notifications.slack.enabled': 'records a crossed threshold once and notifies webhook, chat and e-mail',
  'notifications.slack.webhook_url': 'records a crossed threshold once and notifies webhook, chat and e-mail',
  'notifications.slack.channel': 'records a crossed threshold once and notifies webhook, chat and e-mail',
  'notifications.slack.alerts.cost_thresholds':
    'records a crossed threshold once and notifies webhook, chat and e-mail',
  'notifications.slack.alerts.cluster_events':
    'e-mails the listed members, signs a cluster.stopped webhook naming them, posts to chat',
  'notifications.webhook.enabled': 'delivers each committed change once, signed, in order',
  'notifications.webhook.url': 'delivers each committed change once, signed, in order',
  'notifications.webhook.secret': 'delivers each committed change once, signed, in order',
  'notifications.webhook.events': 'skips event types the webhook does not list',
  'billing.timezone': 'billing-timezone:',
  'billing.cost_alerts': 'records a crossed threshold once and notifies webhook, chat and e-mail',
  'security.two_factor': 'two-factor',
  'security.api_access.ip_whitelist': 'ip-whitelist:',
  'security.api_access.require_ip_whitelist': 'ip-whitelist:',
  'security.api_access.max_api_keys':
    'limits the active keys a member may hold by security.api_access.max_api_keys',
  'security.audit.retention_days': 'purges events older than the retention in settings',
  // Pulls before every create use the account's matching registry (test/images/registry.e2e.db.test.ts).
  'integrations.docker': "pulls a private image with the account's credentials",
  'preferences.default_region': 'default-region-gpu:',
  'preferences.default_gpu_type': 'default-region-gpu:',
};

/** The enforced entry covering a dotted path (itself or an ancestor), else null. */
export function enforcedEntry(path: string): string | null {
  const parts = path.split('.');
  for (let i = parts.length; i > 0; i--) {
    const prefix = parts.slice(0, i).join('.');
    if (prefix in ENFORCED_SETTINGS) return prefix;
  }
  return null;
}
