import { ApiError } from '@anvil/shared';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyRequest } from 'fastify';
import YAML from 'yaml';
import { SECTION_ACCESS } from '../../accounts/settings.ts';
import {
  MASK,
  SECTION_NAMES,
  SECTION_SCHEMAS,
  type SectionName,
  ShortSettingsBody,
  StringEnum,
} from '../../accounts/settings-schema.ts';
import type { AppContext } from '../../context.ts';
import { flatErrors } from '../../http/error-body.ts';
import { AnyObject, actorOf, DateTime, Nullable } from './common.ts';

const tags = ['settings'];

const SETTINGS_DESCRIPTION =
  'Who may: notifications and preferences need accounts read (to read) or write (to change); billing ' +
  'needs billing read / manage_billing and an API key with the billing scope (else 403 ' +
  'INSUFFICIENT_PERMISSIONS with requiredScope); security needs security read / manage_security; ' +
  'integrations need integrations read / manage_integrations. Secret fields (webhook secret, chat webhook ' +
  `URL, access tokens, API keys) are stored encrypted (AES-256-GCM) and read as "${MASK}"; ` +
  `sending "${MASK}" back keeps the stored value. Read-only fields (notifications.email.email, ` +
  'billing.payment_method, security.two_factor.backup_codes) are ignored in updates. ' +
  'Fields this version cannot act on are refused: setting one to anything but the value it reads as ' +
  'answers 400 NOT_SUPPORTED with details {field, setting, reason, supported_value} and changes nothing. ' +
  'They read as what really happens: notifications.email.frequency "immediate", email.alerts.' +
  '{usage_warnings, security_notifications, system_updates, marketing_emails} false, ' +
  'slack.alerts.endpoint_failures false; billing.currency "USD", payment_method, billing_address and ' +
  'auto_recharge empty/off (there is no payment processor); security.session {timeout null, ' +
  'require_reauth_for_sensitive false, concurrent_sessions null} (no login sessions: API keys only); ' +
  'security.audit.log_api_requests and log_resource_access false; integrations.github, ' +
  'monitoring.datadog and monitoring.grafana off (not implemented: Prometheus /metrics is the supported ' +
  'monitoring path); preferences timezone "UTC", language "en", theme "auto", date_format "YYYY/MM/DD", ' +
  'number_format "1,234.56". Sending those values back (an unchanged export) is accepted. ' +
  "security.two_factor.backup_codes reads as the caller's own unused backup codes, masked (see " +
  '/v2/accounts/security/two-factor). Turning two_factor.enabled on needs the caller enrolled (403 ' +
  'OTP_ENROLMENT_REQUIRED); method sms is refused (400 NOT_SUPPORTED: Anvil sends no text messages). ' +
  'Changing security settings is a sensitive operation: where two-factor applies it needs X-Anvil-OTP.';

const IP_WHITELIST_DESCRIPTION =
  'security.api_access.ip_whitelist (IPv4/IPv6 addresses and CIDRs) is in force while ' +
  'require_ip_whitelist is true (build the list, then switch it on): every authenticated API request, ' +
  'port-proxy request, SSH session and web-terminal connection of the account from another address is ' +
  "refused (403 IP_NOT_ALLOWED; SSH: authentication fails). The client's address is the connection's " +
  'peer; X-Forwarded-For is read only from proxies listed in ANVIL_TRUSTED_PROXIES. Lock-out protection: ' +
  "a change that puts a list in force (or changes it) without the caller's own address answers 400 " +
  'CONFIRMATION_REQUIRED (details field, caller_ip, required_field "confirm_lockout") unless the request ' +
  'carries ?confirm_lockout=true.';

const ConfirmLockoutQuery = Type.Object(
  {
    confirm_lockout: Type.Optional(
      Type.Boolean({
        default: false,
        description: "Apply an ip_whitelist that leaves out the caller's own address",
      }),
    ),
  },
  { additionalProperties: false },
);

export const settingsRoutes: FastifyPluginAsyncTypebox<{ context: AppContext }> = async (
  app,
  { context },
) => {
  const settings = context.accounts.settings;
  const config = { scope: 'accounts' as const };

  // Imports may be sent as YAML, as exports may be read as YAML.
  app.addContentTypeParser(
    ['application/yaml', 'application/x-yaml', 'text/yaml'],
    { parseAs: 'string' },
    (_request, body, done) => {
      try {
        done(null, YAML.parse(body as string, { maxAliasCount: 100 }));
      } catch (error) {
        done(
          new ApiError('VALIDATION_ERROR', 'request body is not valid YAML', {
            field: 'body',
            reason: (error as Error).message,
          }),
          undefined,
        );
      }
    },
  );

  app.get(
    '/v2/accounts/settings',
    {
      config,
      schema: {
        tags,
        summary: 'Every settings section the caller may read',
        description: `${SETTINGS_DESCRIPTION} Sections the caller may not read are left out and named in \`restricted\`.`,
        response: {
          200: Type.Object({
            settings: AnyObject,
            restricted: Type.Array(Type.String()),
            updatedAt: Nullable(DateTime),
          }),
          ...flatErrors(401, 403, 429),
        },
      },
    },
    async (request) => settings.getAll(actorOf(request)),
  );

  app.put(
    '/v2/accounts/settings',
    {
      config: {
        ...config,
        sensitive: (request: FastifyRequest) =>
          (request.body as { security?: unknown }).security !== undefined ? 'security settings change' : null,
      },
      schema: {
        tags,
        summary: 'Change settings (short form)',
        description:
          'notifications.{email,slack,webhook} switch the channels; security.twoFactorAuth and ' +
          'sessionTimeout (not supported: any value is 400 NOT_SUPPORTED); defaults.defaultGpuType and ' +
          'defaultRegion set preferences.default_gpu_type and default_region, which a cluster create that ' +
          'omits gpu_type or region uses. Each section touched needs its permission.',
        body: ShortSettingsBody,
        response: {
          200: Type.Object({
            message: Type.String(),
            updatedAt: DateTime,
            sections: Type.Array(Type.String()),
          }),
          ...flatErrors(400, 401, 403, 429),
        },
      },
    },
    async (request) => settings.updateShort(actorOf(request), request.body),
  );

  for (const section of SECTION_NAMES) {
    const rule = SECTION_ACCESS[section];
    app.put(
      `/v2/accounts/settings/${section}`,
      {
        config: section === 'security' ? { ...config, sensitive: 'security settings change' } : config,
        schema: {
          tags,
          summary: `Change ${section} settings (fields given change; others stay)`,
          description: `Needs ${rule.write} on ${rule.scope}${rule.keyScope ? ` and a key with the ${rule.keyScope} scope` : ''}. ${SETTINGS_DESCRIPTION}${section === 'security' ? ` ${IP_WHITELIST_DESCRIPTION}` : ''}`,
          ...(section === 'security' ? { querystring: ConfirmLockoutQuery } : {}),
          body: SECTION_SCHEMAS[section],
          response: {
            200: Type.Object({ [section]: AnyObject, updatedAt: DateTime }),
            ...flatErrors(400, 401, 403, 429),
          },
        },
      },
      async (request) => {
        const result = await settings.updateSection(
          actorOf(request),
          section as SectionName,
          request.body as Record<string, unknown>,
          { confirmLockout: (request.query as { confirm_lockout?: boolean } | undefined)?.confirm_lockout },
        );
        return { [section]: result.section, updatedAt: result.updatedAt };
      },
    );
  }

  app.post(
    '/v2/accounts/settings/notifications/test',
    {
      config,
      schema: {
        tags,
        summary: 'Send a real test notification',
        description:
          'webhook: POSTs a signed `test` event to webhook_url (or the configured URL) — headers ' +
          'X-Anvil-Event, X-Anvil-Delivery, X-Anvil-Timestamp (unix seconds, also `timestamp` in the body) and ' +
          'X-Anvil-Signature: sha256=<hex HMAC-SHA256 of the raw body under notifications.webhook.secret>; ' +
          'verify it over the exact bytes, in constant time, and refuse timestamps older than 5 minutes. ' +
          'slack: POSTs {text, channel} to the chat webhook URL. email: sends through ANVIL_SMTP_URL to the ' +
          'given or configured address, which must be an active member of the account (else 400 ' +
          'VALIDATION_ERROR on email); 503 when e-mail is not configured. A receiver that refuses or cannot ' +
          'be reached answers 502 NOTIFICATION_FAILED. Private and loopback addresses are refused unless ' +
          'ANVIL_OUTBOUND_ALLOW_PRIVATE=true.',
        body: Type.Object(
          {
            type: StringEnum(['webhook', 'slack', 'email'] as const),
            webhook_url: Type.Optional(Type.String({ maxLength: 2048 })),
            channel: Type.Optional(Type.String({ maxLength: 80, pattern: '^[#@]?[A-Za-z0-9._-]+$' })),
            email: Type.Optional(Type.String({ maxLength: 254 })),
          },
          { additionalProperties: false },
        ),
        response: {
          200: Type.Object({
            test: Type.Object({
              type: Type.String(),
              status: Type.String(),
              message: Type.String(),
              timestamp: DateTime,
              response: AnyObject,
            }),
          }),
          ...flatErrors(400, 401, 403, 429, 502, 503),
        },
      },
    },
    async (request) => ({
      test: await context.accounts.notificationTests.send(actorOf(request), request.body),
    }),
  );

  app.get(
    '/v2/accounts/settings/export',
    {
      config: {
        ...config,
        sensitive: (request: FastifyRequest) =>
          (request.query as { include_secrets?: boolean }).include_secrets === true ? 'secret reveal' : null,
      },
      schema: {
        tags,
        summary: 'Export settings as JSON or YAML',
        description:
          'Secrets are masked unless include_secrets=true, which needs manage_security (403 otherwise). ' +
          'Without `sections`, every section the caller may read; naming one the caller may not read is 403. ' +
          'format=yaml answers application/yaml with the same document.',
        querystring: Type.Object(
          {
            format: Type.Optional(StringEnum(['json', 'yaml'] as const)),
            include_secrets: Type.Optional(Type.Boolean({ default: false })),
            sections: Type.Optional(
              Type.String({ maxLength: 200, description: `Comma-separated: ${SECTION_NAMES.join(', ')}` }),
            ),
          },
          { additionalProperties: false },
        ),
        response: { 200: Type.Object({ export: AnyObject }), ...flatErrors(400, 401, 403, 429) },
      },
    },
    async (request, reply) => {
      const format = request.query.format ?? 'json';
      const result = await context.accounts.settingsTransfer.export(actorOf(request), {
        format,
        includeSecrets: request.query.include_secrets ?? false,
        sections: request.query.sections
          ?.split(',')
          .map((s) => s.trim())
          .filter(Boolean),
      });
      if (format === 'yaml') {
        return reply
          .type('application/yaml; charset=utf-8')
          .header('content-disposition', 'attachment; filename="anvil-settings.yaml"')
          .serializer((payload: unknown) => YAML.stringify(payload))
          .send(result);
      }
      return result;
    },
  );

  app.post(
    '/v2/accounts/settings/import',
    {
      config: {
        ...config,
        sensitive: (request: FastifyRequest) => {
          const body = request.body as {
            settings?: Record<string, unknown>;
            export?: { settings?: Record<string, unknown> };
          };
          return (body.settings ?? body.export?.settings)?.['security'] !== undefined
            ? 'security settings change'
            : null;
        },
      },
      schema: {
        tags,
        summary: 'Import settings (JSON or YAML body; an export document is accepted as it is)',
        description:
          'merge_strategy merge (default) changes the fields given; overwrite replaces each given section, ' +
          'unset fields returning to their defaults. Every section is validated (and permission-checked) ' +
          'before anything is written; validate_only writes nothing and reports what would change. Errors ' +
          'name the field as settings.<section>.<path>. confirm_lockout=true applies an ip_whitelist that ' +
          `leaves out the caller's address. ${SETTINGS_DESCRIPTION}`,
        querystring: ConfirmLockoutQuery,
        body: Type.Object(
          {
            settings: Type.Optional(AnyObject),
            export: Type.Optional(
              Type.Object(
                {
                  settings: AnyObject,
                  metadata: Type.Optional(Type.Object({ version: Type.Optional(Type.String()) })),
                },
                { additionalProperties: true },
              ),
            ),
            metadata: Type.Optional(
              Type.Object({ version: Type.Optional(Type.String()) }, { additionalProperties: true }),
            ),
            merge_strategy: Type.Optional(StringEnum(['merge', 'overwrite'] as const)),
            validate_only: Type.Optional(Type.Boolean({ default: false })),
          },
          { additionalProperties: false },
        ),
        response: {
          200: Type.Object({
            valid: Type.Boolean(),
            validate_only: Type.Boolean(),
            merge_strategy: Type.String(),
            applied: Type.Boolean(),
            sections: Type.Array(Type.String()),
            changes: Type.Array(Type.Object({ section: Type.String(), fields: Type.Array(Type.String()) })),
            updatedAt: Nullable(DateTime),
            message: Type.String(),
          }),
          ...flatErrors(400, 401, 403, 415, 429),
        },
      },
    },
    async (request) => {
      const body = request.body;
      const source = body.settings ?? body.export?.settings;
      if (!source) {
        throw new ApiError('VALIDATION_ERROR', 'body field "settings" is required', {
          field: 'settings',
          reason: 'is required',
        });
      }
      return context.accounts.settingsTransfer.import(actorOf(request), {
        settings: source as Record<string, unknown>,
        merge_strategy: body.merge_strategy,
        validate_only: body.validate_only,
        version: body.metadata?.version ?? body.export?.metadata?.version,
        confirm_lockout: request.query.confirm_lockout,
      });
    },
  );
};
