import { createHmac } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { insertSimulatedHosts } from '../../scheduler/simulated-hosts.ts';
import { addAccount, call, type TestMember } from '../../testing/accounts.ts';
import { createTestApp, type TestApp } from '../../testing/app.ts';
import { type HttpReceiver, startHttpReceiver } from '../../testing/receivers.ts';

const SECRET = 'status-event-secret';

/**
 * The webhook outbox: every committed status change of a cluster (recorded by the database trigger
 * whichever code path made it) and every member joining or leaving is delivered once to the account
 * webhook (signed), retried when the receiver fails, and skipped for accounts whose webhook does not
 * list the event.
 */
describe('webhook events from the outbox', () => {
  let t: TestApp;
  let webhook: HttpReceiver;
  let other: TestMember;

  beforeAll(async () => {
    webhook = await startHttpReceiver();
    t = await createTestApp({ env: { ANVIL_OUTBOUND_ALLOW_PRIVATE: 'true' } });
    await insertSimulatedHosts(t.context.db, { prefix: 'se', count: 1, gpusPerHost: 4, region: 'us-east-1' });
    other = await addAccount(t, 'Other');
    const settings = await call(t, {
      method: 'PUT',
      url: '/v2/accounts/settings/notifications',
      payload: {
        webhook: {
          enabled: true,
          url: `${webhook.url}/hooks`,
          secret: SECRET,
          events: ['cluster.status_changed', 'member.joined', 'member.removed'],
        },
      },
    });
    expect(settings.statusCode, settings.body).toBe(200);
  });

  afterAll(async () => {
    await t?.close();
    await webhook?.close();
  });

  const delivered = (type: string) =>
    webhook.requests
      .filter((r) => r.headers['x-anvil-event'] === type)
      .map((r) => {
        expect(r.headers['x-anvil-signature']).toBe(
          `sha256=${createHmac('sha256', SECRET).update(r.body).digest('hex')}`,
        );
        return JSON.parse(r.body) as { id: string; type: string; data: Record<string, unknown> };
      });
  const events = (clusterId: string) =>
    delivered('cluster.status_changed').filter((e) => e.data['cluster_id'] === clusterId);

  /** The outbox rows of one cluster, oldest first. */
  const rows = async (clusterId: string) => {
    const found = await t.context.db.sql.query<{ id: string }>(
      `SELECT id::text AS id FROM webhook_events WHERE data->>'cluster_id' = $1 ORDER BY id`,
      [clusterId],
    );
    return t.context.db.prisma.webhookEvent.findMany({
      where: { id: { in: found.map((r) => BigInt(r.id)) } },
      orderBy: { id: 'asc' },
    });
  };
  const drain = () => t.context.accounts.outbox.drain();

  const create = async (name: string, key?: TestMember) => {
    const created = await call(t, {
      method: 'POST',
      url: '/v1/clusters',
      ...(key ? { key } : {}),
      payload: { name, docker_image: 'busybox', gpu_type: 'H100' },
    });
    expect(created.statusCode, created.body).toBe(201);
    return created.json().data as { id: string; status: string };
  };

  it('delivers each committed change once, signed, in order, from the API and from direct writes alike', async () => {
    const cluster = await create('watched');
    // A write outside the services (as another replica or an operator's SQL would make) is seen too.
    await t.context.db.sql.query(
      `UPDATE clusters SET status = 'error', status_reason = 'GPU fell off the bus' WHERE id = $1`,
      [cluster.id],
    );
    // Not a change: no event.
    await t.context.db.sql.query(`UPDATE clusters SET status = 'error' WHERE id = $1`, [cluster.id]);
    await drain();

    const got = events(cluster.id);
    const transitions = got.map((e) => [e.data['previous_status'], e.data['status']]);
    // Created and placed in one statement on the free simulated host (so it is born starting; pending
    // when it must wait for a host), then error.
    expect(transitions[0]).toEqual([null, expect.stringMatching(/^(pending|starting)$/)]);
    expect(transitions.at(-1)).toEqual([expect.any(String), 'error']);
    for (let i = 1; i < transitions.length; i++) expect(transitions[i]![0]).toBe(transitions[i - 1]![1]);
    expect(got.at(-1)!.data).toMatchObject({
      cluster_name: 'watched',
      reason: 'GPU fell off the bus',
      attempt: 1,
    });
    const sequences = got.map((e) => BigInt(e.data['sequence'] as string));
    expect([...sequences].sort((a, b) => (a < b ? -1 : 1))).toEqual(sequences);
    expect(new Set(got.map((e) => e.id)).size).toBe(got.length);

    const stored = await rows(cluster.id);
    expect(stored.map((r) => r.delivery)).toEqual(stored.map(() => 'sent'));
    expect(stored.map((r) => r.deliveryId)).toEqual(got.map((e) => e.id));
    // A second drain sends nothing again.
    const before = webhook.requests.length;
    await drain();
    expect(webhook.requests.length).toBe(before);
  });

  it('records nothing for a change that rolled back', async () => {
    const cluster = await create('rolled-back');
    await drain();
    const count = (await rows(cluster.id)).length;
    await expect(
      t.context.db.prisma.$transaction(async (tx) => {
        await tx.cluster.update({ where: { id: cluster.id }, data: { status: 'stopped' } });
        throw new Error('abandoned');
      }),
    ).rejects.toThrow('abandoned');
    expect(await rows(cluster.id)).toHaveLength(count);
  });

  it('retries a failed delivery after a delay and records why it failed', async () => {
    const cluster = await create('retried');
    await drain();
    webhook.respondWith(503);
    try {
      await t.context.db.sql.query(`UPDATE clusters SET status = 'stopped' WHERE id = $1`, [cluster.id]);
      await drain();
      const failed = (await rows(cluster.id)).at(-1)!;
      expect(failed).toMatchObject({ delivery: 'pending', attempts: 1, data: { status: 'stopped' } });
      expect(failed.detail).toMatch(/503/);
      // Not due again for RETRY_DELAYS_SECONDS[0]: another pass leaves it alone.
      const tries = webhook.requests.length;
      await drain();
      expect(webhook.requests.length).toBe(tries);
      expect(failed.nextAttemptAt.getTime()).toBeGreaterThan(Date.now() + 5_000);
    } finally {
      webhook.respondWith(200);
    }
    await t.context.db.sql.query(
      `UPDATE webhook_events SET next_attempt_at = clock_timestamp() WHERE data->>'cluster_id' = $1`,
      [cluster.id],
    );
    await drain();
    const sent = (await rows(cluster.id)).at(-1)!;
    expect(sent).toMatchObject({ delivery: 'sent', attempts: 2, detail: null });
    const last = events(cluster.id).at(-1)!;
    expect(last.data).toMatchObject({ previous_status: expect.any(String), status: 'stopped', attempt: 2 });
  });

  it('gives up after the last retry', async () => {
    const cluster = await create('given-up');
    await drain();
    webhook.respondWith(500);
    try {
      await t.context.db.sql.query(`UPDATE clusters SET status = 'stopped' WHERE id = $1`, [cluster.id]);
      for (let attempt = 1; attempt <= 6; attempt++) {
        await t.context.db.sql.query(
          `UPDATE webhook_events SET next_attempt_at = clock_timestamp() WHERE data->>'cluster_id' = $1 AND delivery = 'pending'`,
          [cluster.id],
        );
        await drain();
      }
    } finally {
      webhook.respondWith(200);
    }
    expect((await rows(cluster.id)).at(-1)).toMatchObject({ delivery: 'failed', attempts: 6 });
  });

  it("skips accounts whose webhook does not list the event, and never sends one account's events to another", async () => {
    const before = webhook.requests.length;
    const theirs = await create('theirs', other);
    await drain();
    expect(webhook.requests.length).toBe(before);
    const stored = await rows(theirs.id);
    expect(stored.length).toBeGreaterThan(0);
    for (const row of stored) {
      expect(row.delivery).toBe('skipped');
      expect(row.detail).toBe('the account webhook is not enabled');
    }
  });

  it('tells of a member joining through an invitation and of a member removed', async () => {
    const sent = await call(t, {
      method: 'POST',
      url: '/v2/accounts/team/members/invite',
      payload: { email: 'ada@example.com', role: 'developer' },
    });
    expect(sent.statusCode, sent.body).toBe(201);
    const url = sent.json().invitation.inviteUrl as string;
    const joined = await t.app.inject({
      method: 'POST',
      url: `/v2/accounts/team/invitations/${url.slice(url.lastIndexOf('/') + 1)}/accept`,
      payload: { name: 'Ada' },
    });
    expect(joined.statusCode, joined.body).toBe(201);
    const memberId = joined.json().member.id as string;
    const removed = await call(t, { method: 'DELETE', url: `/v2/accounts/team/members/${memberId}` });
    expect(removed.statusCode, removed.body).toBe(200);
    await drain();
    expect(delivered('member.joined').map((e) => e.data)).toEqual([
      expect.objectContaining({
        user_id: memberId,
        email: 'ada@example.com',
        name: 'Ada',
        role: 'developer',
        invited_by: t.userId,
      }),
    ]);
    expect(delivered('member.removed').map((e) => e.data)).toEqual([
      expect.objectContaining({ user_id: memberId, email: 'ada@example.com', removed_by: t.userId }),
    ]);
  });

  it('skips event types the webhook does not list', async () => {
    const narrowed = await call(t, {
      method: 'PUT',
      url: '/v2/accounts/settings/notifications',
      payload: { webhook: { events: ['member.joined'] } },
    });
    expect(narrowed.statusCode, narrowed.body).toBe(200);
    try {
      const before = webhook.requests.length;
      const cluster = await create('unsubscribed');
      await drain();
      expect(webhook.requests.length).toBe(before);
      const stored = await rows(cluster.id);
      expect(stored.length).toBeGreaterThan(0);
      for (const row of stored) {
        expect(row).toMatchObject({
          delivery: 'skipped',
          detail: "cluster.status_changed is not among the webhook's events",
        });
      }
    } finally {
      await call(t, {
        method: 'PUT',
        url: '/v2/accounts/settings/notifications',
        payload: { webhook: { events: ['cluster.status_changed', 'member.joined', 'member.removed'] } },
      });
    }
  });
});
