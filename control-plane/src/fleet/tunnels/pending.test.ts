import type { Socket } from 'node:net';
import { describe, expect, it } from 'vitest';
import type { WebSocket } from 'ws';
import { PendingTunnels, type TunnelSocket } from './pending.ts';

const fakeSocket: TunnelSocket = { kind: 'websocket', ws: {} as WebSocket, socket: {} as Socket };

describe('PendingTunnels', () => {
  it('hands the socket over to the first claim with the right token, once', async () => {
    const pending = new PendingTunnels();
    const ticket = pending.create('host_a', 10_000, () => new Error('expired'));
    expect(ticket.token).not.toBe(ticket.tunnelId);
    const claim = pending.claim(ticket.tunnelId, ticket.token, 'host_a');
    expect(claim.ok).toBe(true);
    if (claim.ok) claim.accept(fakeSocket);
    await expect(ticket.socket).resolves.toBe(fakeSocket);
    expect(pending.claim(ticket.tunnelId, ticket.token, 'host_a')).toMatchObject({ ok: false });
    expect(pending.size).toBe(0);
  });

  it('refuses a forged token or another host without using the ticket up', () => {
    const pending = new PendingTunnels();
    const ticket = pending.create('host_a', 10_000, () => new Error('expired'));
    expect(pending.claim(ticket.tunnelId, `${ticket.token.slice(0, -1)}x`, 'host_a')).toMatchObject({
      ok: false,
    });
    expect(pending.claim(ticket.tunnelId, 'short', 'host_a')).toMatchObject({ ok: false });
    expect(pending.claim('unknown-tunnel-id-000', ticket.token, 'host_a')).toMatchObject({ ok: false });
    expect(pending.claim(ticket.tunnelId, ticket.token, 'host_b')).toMatchObject({
      ok: false,
      reason: 'the tunnel was asked of another host',
    });
    expect(pending.claim(ticket.tunnelId, ticket.token, 'host_a').ok).toBe(true);
  });

  it('takes a raw upgrade only for a stream ticket, and keeps an exec ticket a raw claim hit', () => {
    const pending = new PendingTunnels();
    const exec = pending.create('host_a', 10_000, () => new Error('expired'));
    expect(pending.claim(exec.tunnelId, exec.token, 'host_a', true)).toMatchObject({
      ok: false,
      status: 400,
    });
    expect(pending.claim(exec.tunnelId, exec.token, 'host_a').ok).toBe(true);
    const stream = pending.create('host_a', 10_000, () => new Error('expired'), true);
    expect(pending.claim(stream.tunnelId, stream.token, 'host_a', true).ok).toBe(true);
    expect(pending.claim(stream.tunnelId, stream.token, 'host_a', true)).toMatchObject({
      ok: false,
      status: 401,
    });
  });

  it('expires and cancels', async () => {
    const pending = new PendingTunnels();
    const expiring = pending.create('host_a', 20, () => new Error('too slow'));
    await expect(expiring.socket).rejects.toThrow('too slow');
    expect(pending.claim(expiring.tunnelId, expiring.token, 'host_a').ok).toBe(false);
    const cancelled = pending.create('host_a', 10_000, () => new Error('expired'));
    cancelled.cancel(new Error('gave up'));
    await expect(cancelled.socket).rejects.toThrow('gave up');
    const other = pending.create('host_a', 10_000, () => new Error('expired'));
    pending.cancelAll(new Error('shutting down'));
    await expect(other.socket).rejects.toThrow('shutting down');
  });
});
