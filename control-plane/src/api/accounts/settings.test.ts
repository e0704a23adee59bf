import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import YAML from 'yaml';
import { loadConfig } from '../../config.ts';
import { createContext } from '../../context.ts';
import { addAccount, addMember, call, type TestMember } from '../../testing/accounts.ts';
import { createTestApp, type TestApp } from '../../testing/index.ts';
import {
  type HttpReceiver,
  type SmtpReceiver,
  startHttpReceiver,
  startSmtpReceiver,
} from '../../testing/receivers.ts';

const KEY = randomBytes(32).toString('hex');

describe('settings', () => {
  let t: TestApp;
  let admin: TestMember;
  let dev: TestMember;
  let receiver: HttpReceiver;
  let smtp: SmtpReceiver;

  beforeAll(async () => {
    receiver = await startHttpReceiver();
    smtp = await startSmtpReceiver();
  });
  afterAll(async () => {
    await receiver.close();
    await smtp.close();
  });

  beforeEach(async () => {
    t = await createTestApp({
      env: { ANVIL_SECRET_KEY: KEY, ANVIL_OUTBOUND_ALLOW_PRIVATE: 'true', ANVIL_SMTP_URL: smtp.url },
    });
    admin = await addMember(t, { role: 'admin' });
    dev = await addMember(t, { role: 'developer' });
    receiver.requests.length = 0;
    receiver.respondWith(200, 'ok');
    smtp.messages.length = 0;
  });
  afterEach(async () => t.close());

  const put = (section: string, payload: unknown, key?: TestMember) =>
    call(t, { method: 'PUT', url: `/v2/accounts/settings/${section}`, payload, ...(key ? { key } : {}) });
  const getAll = async (key?: TestMember) =>
    (await call(t, { url: '/v2/accounts/settings', ...(key ? { key } : {}) })).json();

  it('reads every section with its defaults, leaving out what the caller may not read', async () => {
    const owner = await getAll();
    expect(owner.restricted).toEqual([]);
    expect(owner.settings.notifications.email).toMatchObject({
      enabled: true,
      frequency: 'immediate',
      email: 'admin@localhost',
      alerts: { cost_alerts: true, marketing_emails: false },
    });
    expect(owner.settings.billing).toMatchObject({ currency: 'USD', timezone: 'UTC', cost_alerts: [] });
    expect(owner.settings.security).toMatchObject({
      api_access: { ip_whitelist: [], require_ip_whitelist: false, max_api_keys: 25 },
      session: { timeout: null, require_reauth_for_sensitive: false, concurrent_sessions: null },
      audit: { retention_days: 90 },
    });
    expect(owner.settings.integrations.github).toEqual({
      enabled: false,
      access_token: null,
      username: null,
      repositories: [],
    });
    expect(owner.settings.preferences).toMatchObject({
      language: 'en',
      theme: 'auto',
      date_format: 'YYYY/MM/DD',
    });
    const adminView = await getAll(admin);
    expect(Object.keys(adminView.settings)).toEqual(['notifications', 'billing', 'preferences']);
    expect(adminView.restricted).toEqual(['security', 'integrations']);
    const noBillingKey = await addMember(t, { role: 'admin', keyScopes: ['accounts'] });
    expect((await getAll(noBillingKey)).restricted).toEqual(['billing', 'security', 'integrations']);
    expect((await getAll(dev)).restricted).toHaveLength(5);
  });

  it('updates with the short form', async () => {
    const res = await call(t, {
      method: 'PUT',
      url: '/v2/accounts/settings',
      payload: {
        notifications: { email: false, slack: false },
        defaults: { defaultGpuType: 'H100', defaultRegion: 'eu-west-1' },
      },
    });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({
      message: expect.stringContaining('notifications'),
      updatedAt: expect.any(String),
    });
    const all = await getAll();
    expect(all.settings.notifications.email.enabled).toBe(false);
    // Turning two-factor on needs the caller enrolled: two-factor.test.ts.
    expect(all.settings.security.two_factor).toEqual({ enabled: false, method: 'totp', backup_codes: [] });
    expect(all.settings.preferences).toMatchObject({
      default_gpu_type: 'H100',
      default_region: 'eu-west-1',
    });
    const webhookWithoutUrl = await call(t, {
      method: 'PUT',
      url: '/v2/accounts/settings',
      payload: { notifications: { webhook: true } },
    });
    expect(webhookWithoutUrl.statusCode).toBe(400);
    expect(webhookWithoutUrl.json().details.field).toBe('notifications.webhook.url');
    const adminSecurity = await call(t, {
      method: 'PUT',
      url: '/v2/accounts/settings',
      key: admin,
      payload: { security: { sessionTimeout: 2 } },
    });
    expect(adminSecurity.statusCode).toBe(403);
  });

  it('updates each section, normalising and keeping what was not sent', async () => {
    const billing = await put(
      'billing',
      {
        timezone: 'europe/berlin',
        cost_alerts: [
          { threshold: 100, period: 'daily' },
          { threshold: 2500.5, period: 'monthly', enabled: false },
        ],
        // Read-only and empty: ignored (an unchanged export imports).
        payment_method: { type: null, last_four: null, expires: null, brand: null },
      },
      admin,
    );
    expect(billing.statusCode, billing.body).toBe(200);
    expect(billing.json().billing).toMatchObject({
      currency: 'USD',
      timezone: 'Europe/Berlin',
      cost_alerts: [
        { threshold: 100, period: 'daily', enabled: true },
        { threshold: 2500.5, period: 'monthly', enabled: false },
      ],
      payment_method: { type: null, last_four: null },
    });
    const again = await put('billing', { cost_alerts: [] }, admin);
    expect(again.json().billing).toMatchObject({ timezone: 'Europe/Berlin', cost_alerts: [] });

    const security = await put('security', {
      api_access: {
        // The caller's own address (inject: 127.0.0.1) is listed: no lock-out confirmation needed.
        ip_whitelist: ['203.0.113.0/24', '2001:db8::/32', '198.51.100.7', '127.0.0.1'],
        require_ip_whitelist: true,
        max_api_keys: 50,
      },
      audit: { retention_days: 365 },
    });
    expect(security.statusCode, security.body).toBe(200);
    expect(security.json().security).toMatchObject({
      api_access: { max_api_keys: 50 },
      audit: { retention_days: 365 },
    });

    const prefs = await put('preferences', { default_region: 'us-east-1', default_gpu_type: 'T4' }, admin);
    expect(prefs.json().preferences).toMatchObject({
      timezone: 'UTC',
      default_region: 'us-east-1',
      default_gpu_type: 'T4',
    });
    const notifications = await put(
      'notifications',
      {
        email: {
          alerts: { cost_alerts: false },
          email: 'ignored@example.com',
        },
        slack: {
          enabled: true,
          webhook_url: 'https://hooks.slack.com/services/T000/B000/XXXX',
          channel: '#gpu-alerts',
        },
        webhook: {
          enabled: true,
          url: `${receiver.url}/hook`,
          events: ['endpoint.failed', 'cost.threshold_exceeded'],
          secret: 'whsec_0123456789abcdef',
        },
      },
      admin,
    );
    expect(notifications.statusCode, notifications.body).toBe(200);
    expect(notifications.json().notifications).toMatchObject({
      email: {
        frequency: 'immediate',
        email: 'admin@localhost',
        alerts: { marketing_emails: false, cost_alerts: false },
      },
      slack: { enabled: true, webhook_url: '********', channel: '#gpu-alerts' },
      webhook: { enabled: true, events: ['endpoint.failed', 'cost.threshold_exceeded'], secret: '********' },
    });
  });

  it('stores secrets encrypted, masks them, and keeps them when the mask is sent back', async () => {
    await put('notifications', { webhook: { url: `${receiver.url}/hook`, secret: 'whsec_super_secret_1' } });
    await put('notifications', {
      slack: { webhook_url: 'https://hooks.slack.com/services/T0/B0/chat_secret' },
    });
    const row = await t.context.db.prisma.accountSettings.findUniqueOrThrow({
      where: { accountId: t.accountId },
    });
    const raw = JSON.stringify(row.data);
    expect(raw).not.toContain('whsec_super_secret_1');
    expect(raw).not.toContain('chat_secret');
    expect(raw).toMatch(/"secret":"v1\.[0-9a-f]{8}\./);
    await put('notifications', { webhook: { secret: '********', enabled: true } });
    await put('notifications', { slack: { webhook_url: '********', enabled: true } });
    const exported = (await call(t, { url: '/v2/accounts/settings/export?include_secrets=true' })).json();
    expect(exported.export.settings.notifications.webhook).toMatchObject({
      secret: 'whsec_super_secret_1',
      enabled: true,
    });
    expect(exported.export.settings.notifications.slack).toMatchObject({
      webhook_url: 'https://hooks.slack.com/services/T0/B0/chat_secret',
      enabled: true,
    });
    // A sealed value moved to another account does not open there (bound to account and field).
    const tampered = structuredClone(row.data) as { notifications: { webhook: { secret: string } } };
    await t.context.db.prisma.accountSettings.update({
      where: { accountId: t.accountId },
      data: {
        data: {
          ...tampered,
          integrations: { github: { access_token: tampered.notifications.webhook.secret } },
        },
      },
    });
    const broken = await call(t, { url: '/v2/accounts/settings' });
    expect(broken.statusCode).toBe(500);
  });

  it('checks who may change each section', async () => {
    const security = await put('security', { session: { timeout: 2 } }, admin);
    expect(security.statusCode).toBe(403);
    expect(security.json()).toMatchObject({
      error: 'INSUFFICIENT_PERMISSIONS',
      details: { requiredPermission: 'manage_security', requiredRole: 'owner' },
    });
    const noBillingScope = await addMember(t, { role: 'admin', keyScopes: ['accounts'] });
    const billing = await put('billing', { currency: 'EUR' }, noBillingScope);
    expect(billing.statusCode).toBe(403);
    expect(billing.json()).toMatchObject({
      error: 'INSUFFICIENT_PERMISSIONS',
      details: { requiredScope: 'billing' },
    });
    expect((await put('preferences', { theme: 'dark' }, dev)).statusCode).toBe(403);
    expect((await put('integrations', { github: { enabled: false } }, admin)).statusCode).toBe(403);
    expect(await t.context.db.prisma.accountSettings.count()).toBe(0);
  });

  describe('notification test', () => {
    it('delivers a webhook signed with HMAC-SHA256 of the body under the secret', async () => {
      const secret = 'whsec_test_0123456789';
      await put('notifications', {
        webhook: { enabled: true, url: `${receiver.url}/anvil`, secret, events: ['endpoint.failed'] },
      });
      const res = await call(t, {
        method: 'POST',
        url: '/v2/accounts/settings/notifications/test',
        payload: { type: 'webhook' },
      });
      expect(res.statusCode, res.body).toBe(200);
      expect(res.json().test).toMatchObject({
        type: 'webhook',
        status: 'success',
        response: { status_code: 200, body: 'ok', signed: true },
      });
      expect(receiver.requests).toHaveLength(1);
      const delivery = receiver.requests[0]!;
      expect(delivery.method).toBe('POST');
      expect(delivery.url).toBe('/anvil');
      expect(delivery.headers['content-type']).toBe('application/json');
      // What a receiver does: recompute the HMAC over the raw body and compare in constant time.
      const expected = `sha256=${createHmac('sha256', secret).update(delivery.body).digest('hex')}`;
      const given = String(delivery.headers['x-anvil-signature']);
      expect(given.length).toBe(expected.length);
      expect(timingSafeEqual(Buffer.from(given), Buffer.from(expected))).toBe(true);
      const event = JSON.parse(delivery.body);
      expect(event).toMatchObject({
        type: 'test',
        account_id: t.accountId,
        data: { requested_by: t.userId },
      });
      expect(String(event.timestamp)).toBe(delivery.headers['x-anvil-timestamp']);
      expect(Math.abs(Date.now() / 1000 - event.timestamp)).toBeLessThan(300);
      expect(delivery.headers['x-anvil-event']).toBe('test');
      expect(delivery.headers['x-anvil-delivery']).toBe(res.json().test.response.delivery_id);
      const wrong = `sha256=${createHmac('sha256', 'other-secret').update(delivery.body).digest('hex')}`;
      expect(wrong).not.toBe(given);
    });

    it('posts to a chat webhook, and sends an e-mail over SMTP', async () => {
      const chat = await call(t, {
        method: 'POST',
        url: '/v2/accounts/settings/notifications/test',
        payload: { type: 'slack', webhook_url: `${receiver.url}/services/T1/B1/x`, channel: '#alerts' },
      });
      expect(chat.statusCode, chat.body).toBe(200);
      expect(chat.json().test).toMatchObject({
        type: 'slack',
        status: 'success',
        response: { slack_response: 'ok' },
      });
      expect(JSON.parse(receiver.requests[0]!.body)).toEqual({
        text: expect.stringContaining('Test notification'),
        channel: '#alerts',
      });

      const mail = await call(t, {
        method: 'POST',
        url: '/v2/accounts/settings/notifications/test',
        payload: { type: 'email' },
      });
      expect(mail.statusCode, mail.body).toBe(200);
      expect(mail.json().test).toMatchObject({
        type: 'email',
        status: 'success',
        response: { to: 'admin@localhost' },
      });
      expect(smtp.messages).toHaveLength(1);
      expect(smtp.messages[0]!.to).toEqual(['admin@localhost']);
      expect(smtp.messages[0]!.raw).toContain('Subject: Anvil test notification');
      const other = await call(t, {
        method: 'POST',
        url: '/v2/accounts/settings/notifications/test',
        payload: { type: 'email', email: dev.email },
      });
      expect(other.statusCode).toBe(200);
      expect(smtp.messages[1]!.to).toEqual([dev.email]);
    });

    it('e-mails only active members of the account, whoever names the address (over real HTTP)', async () => {
      const base = await t.app.listen({ host: '127.0.0.1', port: 0 });
      const stranger = await addAccount(t, 'Stranger');
      const gone = await addMember(t, { role: 'developer', status: 'removed' });
      const send = async (email: string) => {
        const res = await fetch(`${base}/v2/accounts/settings/notifications/test`, {
          method: 'POST',
          headers: { authorization: `Bearer ${t.ownerKey}`, 'content-type': 'application/json' },
          body: JSON.stringify({ type: 'email', email }),
        });
        return { status: res.status, body: (await res.json()) as { error?: string; details?: object } };
      };
      const cases: Array<[string, string, number]> = [
        ['an admin', admin.email, 200],
        ['a teammate, in another case', dev.email.toUpperCase(), 200],
        ['an outside address', 'victim@example.org', 400],
        ["another account's owner", stranger.email, 400],
        ['a removed member', gone.email, 400],
        ['a LIKE pattern matching a member', dev.email.replace(/^./, '_'), 400],
      ];
      for (const [what, email, expected] of cases) {
        const before = smtp.messages.length;
        const res = await send(email);
        expect(res.status, `${what}: ${JSON.stringify(res.body)}`).toBe(expected);
        if (expected === 400) {
          expect(res.body).toMatchObject({ error: 'VALIDATION_ERROR', details: { field: 'email' } });
          expect(smtp.messages.length, what).toBe(before);
        } else {
          expect(smtp.messages.length, what).toBe(before + 1);
        }
      }
    });

    it('reports failures: a refusing receiver (502), nothing configured (400), a developer (403)', async () => {
      receiver.respondWith(500, 'boom');
      const refused = await call(t, {
        method: 'POST',
        url: '/v2/accounts/settings/notifications/test',
        payload: { type: 'webhook', webhook_url: `${receiver.url}/x` },
      });
      expect(refused.statusCode).toBe(502);
      expect(refused.json()).toMatchObject({
        error: 'NOTIFICATION_FAILED',
        details: { type: 'webhook', statusCode: 500, body: 'boom' },
      });
      const none = await call(t, {
        method: 'POST',
        url: '/v2/accounts/settings/notifications/test',
        payload: { type: 'slack' },
      });
      expect(none.statusCode).toBe(400);
      expect(none.json().details.field).toBe('webhook_url');
      const byDev = await call(t, {
        method: 'POST',
        url: '/v2/accounts/settings/notifications/test',
        key: dev,
        payload: { type: 'webhook', webhook_url: `${receiver.url}/x` },
      });
      expect(byDev.statusCode).toBe(403);
    });

    it('refuses private addresses unless the operator allows them, and e-mail when SMTP is not configured', async () => {
      const strict = await createTestApp({ env: { ANVIL_SECRET_KEY: KEY } });
      try {
        const res = await call(strict, {
          method: 'POST',
          url: '/v2/accounts/settings/notifications/test',
          payload: { type: 'webhook', webhook_url: `${receiver.url}/x` },
        });
        expect(res.statusCode).toBe(502);
        expect(res.json().details.reason).toMatch(/private address/);
        const named = await call(strict, {
          method: 'POST',
          url: '/v2/accounts/settings/notifications/test',
          payload: { type: 'slack', webhook_url: `http://localhost:${new URL(receiver.url).port}/x` },
        });
        expect(named.statusCode).toBe(502);
        expect(named.json().details.reason).toMatch(/private address/);
        expect(receiver.requests).toHaveLength(0);
        const mail = await call(strict, {
          method: 'POST',
          url: '/v2/accounts/settings/notifications/test',
          payload: { type: 'email' },
        });
        expect(mail.statusCode).toBe(503);
        expect(mail.json().details.variable).toBe('ANVIL_SMTP_URL');
      } finally {
        await strict.close();
      }
    });
  });

  describe('export and import', () => {
    beforeEach(async () => {
      await put('notifications', {
        webhook: { url: 'https://hooks.example.com/anvil', secret: 'whsec_exported_secret' },
      });
      await put('billing', { timezone: 'Asia/Tokyo' });
    });

    it('exports JSON or YAML with secrets masked unless asked (and permitted)', async () => {
      const res = await call(t, { url: '/v2/accounts/settings/export' });
      expect(res.statusCode).toBe(200);
      const doc = res.json().export;
      expect(doc).toMatchObject({
        format: 'json',
        include_secrets: false,
        metadata: { version: '2.0', account_id: t.accountId, exported_by: t.userId },
      });
      expect(Object.keys(doc.settings)).toEqual([
        'notifications',
        'billing',
        'security',
        'integrations',
        'preferences',
      ]);
      expect(doc.settings.notifications.webhook.secret).toBe('********');
      const secrets = (await call(t, { url: '/v2/accounts/settings/export?include_secrets=true' })).json()
        .export;
      expect(secrets.settings.notifications.webhook.secret).toBe('whsec_exported_secret');
      const byAdmin = await call(t, { url: '/v2/accounts/settings/export?include_secrets=true', key: admin });
      expect(byAdmin.statusCode).toBe(403);
      expect(byAdmin.json().details.requiredPermission).toBe('manage_security');
      const adminDoc = (await call(t, { url: '/v2/accounts/settings/export', key: admin })).json().export;
      expect(Object.keys(adminDoc.settings)).toEqual(['notifications', 'billing', 'preferences']);
      expect(
        (await call(t, { url: '/v2/accounts/settings/export?sections=security', key: admin })).statusCode,
      ).toBe(403);
      const some = (
        await call(t, { url: '/v2/accounts/settings/export?sections=billing,preferences' })
      ).json().export;
      expect(Object.keys(some.settings)).toEqual(['billing', 'preferences']);
      const yaml = await call(t, { url: '/v2/accounts/settings/export?format=yaml&sections=billing' });
      expect(yaml.statusCode).toBe(200);
      expect(yaml.headers['content-type']).toMatch(/^application\/yaml/);
      const parsed = YAML.parse(yaml.body);
      expect(parsed.export).toMatchObject({
        format: 'yaml',
        settings: { billing: { timezone: 'Asia/Tokyo' } },
      });
      const bad = await call(t, { url: '/v2/accounts/settings/export?sections=billing,weather' });
      expect(bad.statusCode).toBe(400);
      expect(bad.json().details.field).toBe('sections');
    });

    it('imports an export: validate_only changes nothing, merge and overwrite apply', async () => {
      const exported = (await call(t, { url: '/v2/accounts/settings/export' })).json();
      exported.export.settings.billing.timezone = 'Europe/Berlin';
      exported.export.settings.preferences.default_region = 'eu-west-1';
      const before = await t.context.db.prisma.accountSettings.findUniqueOrThrow({
        where: { accountId: t.accountId },
      });
      const dry = await call(t, {
        method: 'POST',
        url: '/v2/accounts/settings/import',
        payload: { ...exported, validate_only: true },
      });
      expect(dry.statusCode, dry.body).toBe(200);
      expect(dry.json()).toMatchObject({
        valid: true,
        validate_only: true,
        applied: false,
        merge_strategy: 'merge',
        updatedAt: null,
      });
      expect(dry.json().changes).toEqual(
        expect.arrayContaining([
          { section: 'billing', fields: ['timezone'] },
          { section: 'preferences', fields: ['default_region'] },
          { section: 'notifications', fields: [] },
        ]),
      );
      const after = await t.context.db.prisma.accountSettings.findUniqueOrThrow({
        where: { accountId: t.accountId },
      });
      expect(after).toEqual(before);

      const applied = await call(t, {
        method: 'POST',
        url: '/v2/accounts/settings/import',
        payload: exported,
      });
      expect(applied.json()).toMatchObject({
        applied: true,
        sections: ['notifications', 'billing', 'security', 'integrations', 'preferences'],
      });
      const all = (await getAll()).settings;
      expect(all.billing.timezone).toBe('Europe/Berlin');
      expect(all.preferences.default_region).toBe('eu-west-1');
      // The masked secret in the export kept the stored one.
      const secret = (await call(t, { url: '/v2/accounts/settings/export?include_secrets=true' })).json()
        .export.settings;
      expect(secret.notifications.webhook.secret).toBe('whsec_exported_secret');

      const overwrite = await call(t, {
        method: 'POST',
        url: '/v2/accounts/settings/import',
        payload: { settings: { billing: { cost_alerts: [] } }, merge_strategy: 'overwrite' },
      });
      expect(overwrite.statusCode).toBe(200);
      const billing = (await getAll()).settings.billing;
      expect(billing).toMatchObject({ timezone: 'UTC', cost_alerts: [] });
      expect((await getAll()).settings.preferences.default_region).toBe('eu-west-1');
    });

    it('imports YAML, and refuses invalid documents without writing anything', async () => {
      const yaml = YAML.stringify({
        settings: { preferences: { default_region: 'ap-southeast-1', default_gpu_type: 'T4' } },
      });
      const res = await t.app.inject({
        method: 'POST',
        url: '/v2/accounts/settings/import',
        headers: { ...t.auth(), 'content-type': 'application/yaml' },
        payload: yaml,
      });
      expect(res.statusCode, res.body).toBe(200);
      expect((await getAll()).settings.preferences).toMatchObject({
        default_region: 'ap-southeast-1',
        default_gpu_type: 'T4',
      });
      const before = await t.context.db.prisma.accountSettings.findUniqueOrThrow({
        where: { accountId: t.accountId },
      });
      for (const [payload, field] of [
        [{ settings: { billing: { currency: 'BTC' } } }, 'settings.billing.currency'],
        [
          {
            settings: { preferences: { default_region: 'eu-west-1' }, billing: { timezone: 'Mars/Olympus' } },
          },
          'settings.billing.timezone',
        ],
        [
          { settings: { security: { api_access: { ip_whitelist: ['10.0.0.0/40'] } } } },
          'settings.security.api_access.ip_whitelist.0',
        ],
        [{ settings: { weather: {} } }, 'settings.weather'],
        [{ settings: {} }, 'settings'],
        [{ settings: { billing: { currency: 'EUR' } }, metadata: { version: '1.0' } }, 'metadata.version'],
      ] as const) {
        const bad = await call(t, { method: 'POST', url: '/v2/accounts/settings/import', payload });
        expect(bad.statusCode, JSON.stringify(payload)).toBe(400);
        expect(bad.json()).toMatchObject({ error: 'VALIDATION_ERROR', details: { field } });
      }
      const broken = await t.app.inject({
        method: 'POST',
        url: '/v2/accounts/settings/import',
        headers: { ...t.auth(), 'content-type': 'application/yaml' },
        payload: 'settings: [unclosed',
      });
      expect(broken.statusCode).toBe(400);
      const byAdmin = await call(t, {
        method: 'POST',
        url: '/v2/accounts/settings/import',
        key: admin,
        payload: { settings: { security: { session: { timeout: 3 } } } },
      });
      expect(byAdmin.statusCode).toBe(403);
      expect(
        await t.context.db.prisma.accountSettings.findUniqueOrThrow({ where: { accountId: t.accountId } }),
      ).toEqual(before);
    });
  });

  it('limits the active keys a member may hold by security.api_access.max_api_keys', async () => {
    await put('security', { api_access: { max_api_keys: 2 } });
    const mint = () =>
      call(t, {
        method: 'POST',
        url: '/v2/auth/api-keys',
        key: dev,
        payload: { name: 'k', permissions: ['read'] },
      });
    expect((await mint()).statusCode).toBe(201);
    const third = await mint();
    expect(third.statusCode).toBe(403);
    expect(third.json()).toMatchObject({
      error: 'LIMIT_EXCEEDED',
      details: { limit: 'max_api_keys', max: 2, current: 2 },
    });
  });

  it('re-seals secrets under a new ANVIL_SECRET_KEY when the old one is listed as previous', async () => {
    await put('notifications', {
      webhook: { url: 'https://hooks.example.com/x', secret: 'whsec_rotate_me_please' },
    });
    const newKey = randomBytes(32).toString('base64');
    const config = loadConfig({
      ANVIL_DATA_DIR: '/tmp/anvil-test-unused',
      ANVIL_SECRET_KEY: newKey,
      ANVIL_SECRET_KEY_PREVIOUS: KEY,
    });
    const rotated = createContext(config, t.database.db);
    await rotated.accounts.start();
    await rotated.accounts.stop();
    const row = await t.context.db.prisma.accountSettings.findUniqueOrThrow({
      where: { accountId: t.accountId },
    });
    const sealed = (row.data as { notifications: { webhook: { secret: string } } }).notifications.webhook
      .secret;
    expect(sealed.split('.')[1]).toBe(rotated.accounts.secrets().keyId);
    const onlyNew = createContext(
      loadConfig({ ANVIL_DATA_DIR: '/tmp/anvil-test-unused', ANVIL_SECRET_KEY: newKey }),
      t.database.db,
    );
    const plain = await onlyNew.accounts.settings.effective(t.accountId);
    expect((plain.notifications['webhook'] as { secret: string }).secret).toBe('whsec_rotate_me_please');
  });
});
