import { newId } from '@anvil/shared';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestApp, type TestApp } from '../../testing/app.ts';
import { clusterRow } from '../../testing/cluster-row.ts';
import { tryUpgrade } from '../../testing/ws-upgrade.ts';

/** A shell is a member's tool: service keys are refused by the terminal, over REST and the WebSocket. */
describe('web terminal and service keys', () => {
  let t: TestApp;
  let base: string;
  let serviceKey: string;
  const clusterId = newId('cluster');

  /** The upgrade's answer: the HTTP status and body of a refusal, or 101 when it opened. */
  const upgrade = (key: string) =>
    tryUpgrade(`${base.replace('http', 'ws')}/v1/clusters/${clusterId}/terminal`, {
      headers: { authorization: `Bearer ${key}` },
    });

  beforeAll(async () => {
    t = await createTestApp();
    base = await t.app.listen({ port: 0, host: '127.0.0.1' });
    await t.context.db.prisma.cluster.create({
      data: clusterRow({ id: clusterId, accountId: t.accountId, ownerId: t.userId, name: 'terminal' }),
    });
    const owner = await t.context.keys.resolve(`Bearer ${t.ownerKey}`);
    serviceKey = (
      await t.context.apiKeys.create(owner, { name: 'svc', type: 'service', permissions: ['read', 'write'] })
    ).value;
  });

  afterAll(async () => {
    await t?.close();
  });

  it('refuses a service key on the WebSocket (403) where a member key with the same rights goes further', async () => {
    const refused = await upgrade(serviceKey);
    expect(refused.status).toBe(403);
    expect(JSON.parse(refused.body).error).toMatchObject({
      code: 'FORBIDDEN',
      details: { keyType: 'service' },
    });
    // The owner's key passes the key checks and stops only where this test has no container to reach.
    const member = await upgrade(t.ownerKey);
    expect(member.status).not.toBe(403);
    expect(member.status).not.toBe(401);
  });

  it('refuses a service key when it opens a session over REST', async () => {
    const answer = await t.app.inject({
      method: 'POST',
      url: `/v1/clusters/${clusterId}/terminal/sessions`,
      headers: t.auth(serviceKey),
      payload: {},
    });
    expect(answer.statusCode).toBe(403);
  });
});
