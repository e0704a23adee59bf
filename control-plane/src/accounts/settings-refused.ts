import { ApiError } from '@anvil/shared';

/**
 * Settings this version accepts in documents but cannot act on, keyed by dotted path (a path covers
 * every field under it), with the reason a caller is told. Reading shows each with the value that
 * describes what really happens (a switch off, nothing configured); an update or import that sets one to
 * anything else is refused with 400 NOT_SUPPORTED naming the field, and nothing is written. Sending the
 * shown value back (an unchanged export) is accepted.
 */
export const REFUSED_SETTINGS: Record<string, string> = {
  'notifications.email.frequency':
    'daily and weekly digests are not sent: notification e-mails go out immediately',
  'notifications.email.alerts.usage_warnings':
    'no usage-warning e-mails exist; usage alert rules (POST /v2/accounts/usage/alerts) e-mail through alerts.cost_alerts',
  'notifications.email.alerts.security_notifications':
    'no security e-mails are sent; subscribe the webhook to security events instead',
  'notifications.email.alerts.system_updates': 'no system-update e-mails are sent',
  'notifications.email.alerts.marketing_emails': 'Anvil sends no marketing e-mail',
  'notifications.slack.alerts.endpoint_failures':
    'endpoint failures are not posted to chat; subscribe the webhook to endpoint.failed',
  'billing.currency': 'costs are priced and reported in USD only (there is no currency conversion)',
  'billing.payment_method': 'there is no payment processor: no card can be kept on file',
  'billing.billing_address': 'there is no payment processor and no invoices to address',
  'billing.auto_recharge': 'there is no payment processor and no prepaid balance to recharge',
  'security.session':
    'the API has no login sessions (API keys only); proxy sessions use the cluster proxy session_timeout_minutes',
  'security.audit.log_api_requests':
    'API requests are counted per minute for /v2/analytics/api-usage, not written to the audit log',
  'security.audit.log_resource_access':
    'resource reads are not written to the audit log (permission changes and denials are)',
  'integrations.github': 'the GitHub integration is not implemented',
  'integrations.monitoring.datadog':
    'the Datadog integration is not implemented: scrape the Prometheus endpoint /metrics instead',
  'integrations.monitoring.grafana':
    'the Grafana integration is not implemented: point Grafana at a Prometheus scraping /metrics',
  'preferences.timezone': 'no view uses a display time zone; reports use billing.timezone',
  'preferences.language': 'the API and dashboard are in English only',
  'preferences.theme': 'the dashboard has one theme',
  'preferences.date_format': 'dates are always ISO 8601 in the API',
  'preferences.number_format': 'numbers are always JSON numbers in the API',
};

type Json = Record<string, unknown>;
const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** The refused entry covering a dotted path (itself or an ancestor), else null. */
export function refusedEntry(path: string): string | null {
  const parts = path.split('.');
  for (let i = parts.length; i > 0; i--) {
    const prefix = parts.slice(0, i).join('.');
    if (prefix in REFUSED_SETTINGS) return prefix;
  }
  return null;
}

/**
 * Throws NOT_SUPPORTED for the first field of `input` (a section's update) that a refused entry covers
 * and that differs from the shown value in `shown` (the section's defaults). details.field is relative
 * to the section, as VALIDATION_ERROR's is; the message names the whole path.
 */
export function refuseUnsupported(section: string, input: unknown, shown: unknown): void {
  const walk = (value: unknown, base: unknown, path: string[]) => {
    const dotted = [section, ...path].join('.');
    const entry = refusedEntry(dotted);
    if (isObject(value) && (entry === null || isObject(base))) {
      for (const [key, child] of Object.entries(value)) {
        walk(child, isObject(base) ? base[key] : undefined, [...path, key]);
      }
      return;
    }
    if (entry === null || value === undefined) return;
    if (JSON.stringify(value) === JSON.stringify(base)) return;
    throw new ApiError('NOT_SUPPORTED', `${dotted} is not supported: ${REFUSED_SETTINGS[entry]}`, {
      field: path.join('.'),
      setting: entry,
      reason: REFUSED_SETTINGS[entry],
      supported_value: base ?? null,
    });
  };
  walk(input, shown, []);
}

/** `doc` (a whole settings document) with every refused field set back to what `defaults` shows. */
export function withRefusedShownAsDefault(doc: Json, defaults: Json): Json {
  for (const path of Object.keys(REFUSED_SETTINGS)) {
    const keys = path.split('.');
    let node: unknown = doc;
    let base: unknown = defaults;
    for (const key of keys.slice(0, -1)) {
      node = isObject(node) ? node[key] : undefined;
      base = isObject(base) ? base[key] : undefined;
    }
    const leaf = keys[keys.length - 1]!;
    if (isObject(node) && isObject(base)) node[leaf] = structuredClone(base[leaf]);
  }
  return doc;
}

/** Removes refused fields from a section's stored overrides (values written before they were refused). */
export function dropRefused(section: string, overrides: Json): Json {
  for (const path of Object.keys(REFUSED_SETTINGS)) {
    const keys = path.split('.');
    if (keys[0] !== section) continue;
    let node: unknown = overrides;
    for (const key of keys.slice(1, -1)) node = isObject(node) ? node[key] : undefined;
    if (isObject(node)) delete node[keys[keys.length - 1]!];
  }
  return overrides;
}
