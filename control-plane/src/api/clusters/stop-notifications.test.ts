import { createHmac, timingSafeEqual } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { insertSimulatedHosts } from '../../scheduler/simulated-hosts.ts';
import { addAccount, addMember, call, type TestMember } from '../../testing/accounts.ts';
import { createTestApp, type TestApp } from '../../testing/app.ts';
import {
  type HttpReceiver,
  type SmtpReceiver,
  startHttpReceiver,
  startSmtpReceiver,
} from '../../testing/receivers.ts';
import { waitFor } from '../../testing/wait.ts';

const SECRET = 'stop-notification-secret';

/**
 * notify_users on POST /v1/clusters/{id}/stop, delivered for real: a local HTTP receiver for the signed
 * webhook and the chat webhook, a local SMTP server for the e-mails. The hosts are simulated rows with
 * no agent connected, so the stop's phases find the host unreachable and complete at once (with notes).
 */
describe('cluster stop notifications (notify_users)', () => {
  let t: TestApp;
  let webhook: HttpReceiver;
  let chat: HttpReceiver;
  let smtp: SmtpReceiver;
  let alice: TestMember;
  let bob: TestMember;
  let stranger: TestMember;

  beforeAll(async () => {
    webhook = await startHttpReceiver();
    chat = await startHttpReceiver();
    smtp = await startSmtpReceiver();
    t = await createTestApp({ env: { ANVIL_OUTBOUND_ALLOW_PRIVATE: 'true', ANVIL_SMTP_URL: smtp.url } });
    await insertSimulatedHosts(t.context.db, { prefix: 'sn', count: 2, gpusPerHost: 2, region: 'us-east-1' });
    alice = await addMember(t, { role: 'developer', name: 'Alice' });
    bob = await addMember(t, { role: 'viewer', name: 'Bob' });
    stranger = await addAccount(t, 'Stranger');
    // Bob turned e-mail notifications off in his preferences.
    const prefs = await call(t, {
      method: 'PUT',
      url: '/v2/accounts/profile/preferences',
      key: bob,
      payload: { emailNotifications: false },
    });
    expect(prefs.statusCode, prefs.body).toBe(200);
    const settings = await call(t, {
      method: 'PUT',
      url: '/v2/accounts/settings/notifications',
      payload: {
        webhook: {
          enabled: true,
          url: `${webhook.url}/hooks/anvil`,
          secret: SECRET,
          events: ['cluster.stopped'],
        },
        slack: {
          enabled: true,
          webhook_url: `${chat.url}/services/T1/B1/x`,
          channel: '#gpu',
          alerts: { cluster_events: true },
        },
      },
    });
    expect(settings.statusCode, settings.body).toBe(200);
  });

  afterAll(async () => {
    await t?.close();
    await Promise.all([webhook?.close(), chat?.close(), smtp?.close()]);
  });

  /** A cluster placed on a simulated host and marked running (no agent runs its container). */
  const runningCluster = async (name: string) => {
    const created = await call(t, {
      method: 'POST',
      url: '/v1/clusters',
      payload: { name, docker_image: 'busybox', gpu_type: 'H100' },
    });
    expect(created.statusCode, created.body).toBe(201);
    const id = created.json().data.id as string;
    await t.context.db.prisma.cluster.update({
      where: { id },
      data: { status: 'running', sessionStartedAt: new Date() },
    });
    return id;
  };

  const verifiedEvents = () =>
    webhook.requests.map((r) => {
      const expected = Buffer.from(`sha256=${createHmac('sha256', SECRET).update(r.body).digest('hex')}`);
      const given = Buffer.from(String(r.headers['x-anvil-signature']));
      expect(given.length === expected.length && timingSafeEqual(given, expected)).toBe(true);
      expect(r.headers['x-anvil-event']).toBe('cluster.stopped');
      return JSON.parse(r.body);
    });

  it('refuses ids that are not members of the account, naming them, and changes nothing', async () => {
    const id = await runningCluster('refused');
    const stop = await call(t, {
      method: 'POST',
      url: `/v1/clusters/${id}/stop`,
      payload: { notify_users: [alice.userId, stranger.userId, 'usr_doesnotexist', stranger.userId] },
    });
    expect(stop.statusCode, stop.body).toBe(400);
    expect(stop.json()).toMatchObject({
      success: false,
      error: {
        code: 'INVALID_PARAMETERS',
        details: { invalid_user_ids: [stranger.userId, 'usr_doesnotexist'] },
      },
    });
    expect(stop.json().error.details.notify_users).toContain(stranger.userId);
    const row = await t.context.db.prisma.cluster.findUniqueOrThrow({ where: { id } });
    expect(row.status).toBe('running');
    expect(row.operation).toBeNull();
    expect(webhook.requests).toHaveLength(0);
  });

  it('e-mails the listed members, signs a cluster.stopped webhook naming them, posts to chat, and records each result', async () => {
    const id = await runningCluster('notified');
    const before = {
      hooks: webhook.requests.length,
      chats: chat.requests.length,
      mails: smtp.messages.length,
    };
    const stop = await call(t, {
      method: 'POST',
      url: `/v1/clusters/${id}/stop`,
      payload: {
        notify_users: [alice.userId, bob.userId, alice.userId],
        stop_reason: 'end of experiment',
        wait_for_completion: true,
        timeout_minutes: 1,
      },
    });
    expect(stop.statusCode, stop.body).toBe(200);
    const notifications = stop.json().data.notifications;
    expect(notifications).toMatchObject({
      state: 'done',
      outcome: 'stopped',
      reason: null,
      webhook: { status: 'sent', delivery_id: expect.stringMatching(/^evt_/) },
      slack: { status: 'sent' },
    });
    expect(notifications.users).toEqual([
      expect.objectContaining({
        user_id: alice.userId,
        name: 'Alice',
        email: alice.email,
        status: 'sent',
        message_id: expect.any(String),
      }),
      expect.objectContaining({
        user_id: bob.userId,
        status: 'skipped',
        detail: "e-mail notifications are off in the member's preferences",
        message_id: null,
      }),
    ]);

    // The same results through GET, in the cluster's operation.
    const got = (await call(t, { url: `/v1/clusters/${id}` })).json().data;
    expect(got.status).toBe('stopped');
    expect(got.operation.notifications).toEqual(notifications);

    // One e-mail, to Alice only.
    const mails = smtp.messages.slice(before.mails);
    expect(mails.map((m) => m.to)).toEqual([[alice.email]]);
    expect(mails[0]!.raw).toContain('end of experiment');

    // One signed webhook delivery naming both members.
    const events = verifiedEvents().slice(before.hooks);
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({
      id: notifications.webhook.delivery_id,
      type: 'cluster.stopped',
      account_id: t.accountId,
      data: {
        cluster_id: id,
        cluster_name: 'notified',
        status: 'stopped',
        outcome: 'stopped',
        stop_type: 'graceful',
        stop_reason: 'end of experiment',
        requested_by: t.userId,
        snapshot: { requested: false, snapshot_id: null },
        notify_users: [
          { user_id: alice.userId, name: 'Alice', email: alice.email },
          { user_id: bob.userId, name: 'Bob', email: bob.email },
        ],
      },
    });
    // The host is a database row with no agent: the phases say so, and the event carries it.
    expect(events[0].data.notes.join('\n')).toMatch(/host unreachable/);

    const chats = chat.requests.slice(before.chats).map((r) => JSON.parse(r.body));
    expect(chats).toHaveLength(1);
    expect(chats[0]).toMatchObject({ channel: '#gpu' });
    expect(chats[0].text).toContain(`Cluster "notified" (${id}) was stopped.`);
    expect(chats[0].text).toContain('Notified: Alice, Bob');
  });

  it('reports a stop whose state could not be saved as failed, and records a receiver that refused', async () => {
    const id = await runningCluster('unsaved');
    const before = webhook.requests.length;
    webhook.respondWith(500, 'receiver down');
    try {
      const stop = await call(t, {
        method: 'POST',
        url: `/v1/clusters/${id}/stop`,
        payload: {
          notify_users: [alice.userId],
          save_state: true,
          wait_for_completion: true,
          timeout_minutes: 1,
        },
      });
      expect(stop.statusCode, stop.body).toBe(200);
      const notifications = stop.json().data.notifications;
      expect(notifications).toMatchObject({
        outcome: 'failed',
        reason: expect.stringMatching(
          /^the cluster stopped, but its state was not saved: no container to snapshot/,
        ),
        webhook: { status: 'failed', detail: 'receiver answered HTTP 500', delivery_id: null },
        users: [{ user_id: alice.userId, status: 'sent' }],
      });
      const events = verifiedEvents().slice(before);
      expect(events).toHaveLength(1);
      expect(events[0].data).toMatchObject({
        outcome: 'failed',
        snapshot: { requested: true, snapshot_id: null },
      });
    } finally {
      webhook.respondWith(200);
    }
  });

  it('sends an unfinished stop as failed when a delete takes it over', async () => {
    const id = await runningCluster('interrupted');
    const before = { hooks: webhook.requests.length, mails: smtp.messages.length };
    // Hold the supervisor so the stop is still unfinished when the delete arrives.
    await t.context.clusters.supervisor.stop();
    try {
      const stop = await call(t, {
        method: 'POST',
        url: `/v1/clusters/${id}/stop`,
        payload: { notify_users: [alice.userId] },
      });
      expect(stop.statusCode, stop.body).toBe(202);
      const del = await call(t, {
        method: 'DELETE',
        url: `/v1/clusters/${id}`,
        payload: { confirm_deletion: 'DELETE' },
      });
      expect(del.statusCode, del.body).toBe(202);
    } finally {
      t.context.clusters.supervisor.start();
    }
    const row = await waitFor(
      'the cluster deleted',
      async () => {
        const r = await t.context.db.prisma.cluster.findUniqueOrThrow({ where: { id } });
        return r.status === 'deleted' ? r : null;
      },
      30_000,
    );
    const op = row.operation as {
      kind: string;
      notifications: { state: string; outcome: string; users: unknown[] };
    };
    expect(op.kind).toBe('delete');
    expect(op.notifications).toMatchObject({
      state: 'done',
      outcome: 'failed',
      users: [{ user_id: alice.userId, status: 'sent' }],
    });
    const events = verifiedEvents().slice(before.hooks);
    expect(events).toHaveLength(1);
    expect(events[0].data).toMatchObject({
      cluster_id: id,
      status: 'deleting',
      outcome: 'failed',
      reason: 'the cluster is being deleted: the delete took over before the stop completed',
      notify_users: [{ user_id: alice.userId }],
    });
    expect(smtp.messages.slice(before.mails).map((m) => m.to)).toEqual([[alice.email]]);
  });
});
