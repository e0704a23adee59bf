import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type Dockerode from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { addMember } from '../../control-plane/src/testing/accounts.ts';
import { dockerOrFail, testDocker } from '../fixtures/images/docker.ts';
import { insertCluster, type SshWorld, startSshWorld, waitFor } from './fixtures.ts';

interface Message {
  type: string;
  seq?: number;
  data?: string;
  code?: number | null;
  from?: number;
  to?: number;
  session_id?: string;
}

/** A terminal WebSocket client that keeps the output by offset, as the dashboard does. */
class TerminalClient {
  output = Buffer.alloc(0);
  /** Offset of output[0] in the session's stream. */
  base = -1;
  messages: Message[] = [];
  closed: { code: number; reason: string } | null = null;

  private constructor(readonly ws: WebSocket) {
    ws.on('message', (raw) => {
      const message = JSON.parse(raw.toString()) as Message;
      this.messages.push(message);
      if (message.type === 'output') {
        const chunk = Buffer.from(message.data!, 'base64');
        if (this.base < 0) this.base = message.seq!;
        // Keep only bytes after what we hold: a replay never duplicates output.
        const have = this.base + this.output.length;
        const skip = have - message.seq!;
        if (skip < chunk.length)
          this.output = Buffer.concat([this.output, chunk.subarray(Math.max(0, skip))]);
      }
    });
    ws.on('close', (code, reason) => {
      this.closed = { code, reason: reason.toString() };
    });
  }

  static open(url: string, headers: Record<string, string> = {}): Promise<TerminalClient | number> {
    return new Promise((resolve) => {
      const ws = new WebSocket(url, { headers });
      ws.on('unexpected-response', (_req, res) => {
        resolve(res.statusCode ?? 0);
        ws.terminate();
      });
      ws.on('error', () => {});
      // Listen before the first message can arrive.
      const client = new TerminalClient(ws);
      ws.on('open', () => resolve(client));
    });
  }

  get next(): number {
    return this.base + this.output.length;
  }
  get text(): string {
    return this.output.toString('utf8');
  }
  send(message: object) {
    this.ws.send(JSON.stringify(message));
  }
  type(text: string) {
    this.send({ type: 'input', data: text });
  }
  waitFor(pattern: RegExp) {
    return waitFor(`terminal output ${pattern}`, async () => pattern.test(this.text), 30_000);
  }
}

describe.skipIf(!dockerOrFail('test/ssh/terminal.e2e.test.ts'))(
  'web terminal over WebSocket into a real container',
  () => {
    let docker: Dockerode;
    let world: SshWorld;
    let dir: string;
    let clusterId: string;
    let wsBase: string;

    const createSession = async (headers = world.t.auth(), body: object = { cols: 80, rows: 24 }) =>
      world.t.app.inject({
        method: 'POST',
        url: `/v1/clusters/${clusterId}/terminal/sessions`,
        headers,
        payload: body,
      });

    beforeAll(async () => {
      docker = testDocker();
      dir = mkdtempSync(join(tmpdir(), 'anvil-term-'));
      world = await startSshWorld(docker, join(dir, 'data'));
      wsBase = world.url.replace(/^http/, 'ws');
      ({ id: clusterId } = await insertCluster(world.t, {
        ownerId: world.t.userId,
        accountId: world.t.accountId,
        hostId: world.hostId,
      }));
    }, 300_000);

    afterAll(async () => {
      await world?.close();
      rmSync(dir, { recursive: true, force: true });
    });

    it('gives a PTY with resize, and a reconnect with a new ticket loses no output', async () => {
      const created = await createSession();
      expect(created.statusCode, created.body).toBe(201);
      const session = created.json().data;
      expect(session).toMatchObject({ cluster_id: clusterId, reconnect_window_seconds: 60 });
      expect(session.session_id).toMatch(/^term_/);

      const first = await TerminalClient.open(`${wsBase}${session.websocket_path}`);
      if (typeof first === 'number') throw new Error(`upgrade refused: ${first}`);
      first.type('stty size\n');
      await first.waitFor(/24 80/);
      first.send({ type: 'resize', cols: 132, rows: 40 });
      // Asks again on each poll until the new size shows.
      await waitFor('resized', async () => {
        if (/40 132/.test(first.text)) return true;
        first.type('stty size\n');
        return false;
      });

      // The ticket was used once: it opens nothing again.
      expect(await TerminalClient.open(`${wsBase}${session.websocket_path}`)).toBe(401);

      // Output produced while nobody is attached is buffered and replayed from the offset asked for.
      first.type('sleep 1; echo "while-$((6*7))-away"\n');
      await first.waitFor(/sleep 1; echo/);
      const resumeAt = first.next;
      first.ws.close();
      await waitFor('detached', async () => first.closed !== null);
      // The shell prints while detached (the process keeps running): its output lands in the session's buffer.
      const detached = world.t.context.terminal.find(clusterId, session.session_id, world.t.userId);
      await waitFor('output while detached', async () =>
        detached?.buffer.since(resumeAt).data.toString().includes('while-42-away'),
      );

      const again = await world.t.app.inject({
        method: 'POST',
        url: `/v1/clusters/${clusterId}/terminal/sessions/${session.session_id}/tickets`,
        headers: world.t.auth(),
      });
      expect(again.statusCode, again.body).toBe(201);
      const ticket = again.json().data.ticket as string;
      const second = await TerminalClient.open(
        `${wsBase}/v1/clusters/${clusterId}/terminal?session_id=${session.session_id}&ticket=${encodeURIComponent(ticket)}&after=${resumeAt}`,
      );
      if (typeof second === 'number') throw new Error(`reconnect refused: ${second}`);
      await second.waitFor(/while-42-away/);
      expect(second.messages[0]).toMatchObject({ type: 'ready', session_id: session.session_id });
      expect(second.base).toBe(resumeAt);
      // Both halves together are the session's output, nothing lost or repeated at the seam.
      const whole = Buffer.concat([first.output, second.output]).toString();
      expect(whole.match(/while-42-away/g)).toHaveLength(1);

      // The shell's exit is reported and closes the socket.
      second.type('exit 5\n');
      await waitFor('exit message', async () => second.messages.find((m) => m.type === 'exit'));
      expect(second.messages.find((m) => m.type === 'exit')).toMatchObject({ code: 5 });
      await waitFor('closed', async () => second.closed !== null);
    }, 240_000);

    it('accepts an API key in Authorization (non-browser clients) and refuses others', async () => {
      const viaKey = await TerminalClient.open(`${wsBase}/v1/clusters/${clusterId}/terminal`, world.t.auth());
      if (typeof viaKey === 'number') throw new Error(`refused: ${viaKey}`);
      viaKey.type('echo key-$((1+1))\n');
      await viaKey.waitFor(/key-2/);
      viaKey.ws.close();

      expect(await TerminalClient.open(`${wsBase}/v1/clusters/${clusterId}/terminal`)).toBe(401);
      expect(await TerminalClient.open(`${wsBase}/v1/clusters/${clusterId}/terminal?ticket=tkt_forged`)).toBe(
        401,
      );
      const viewer = await addMember(world.t, { role: 'viewer' });
      const denied = await createSession(viewer.headers);
      expect([403, 404]).toContain(denied.statusCode);
      expect(denied.json()).toMatchObject({ success: false });
      const plain = await world.t.app.inject({ method: 'GET', url: `/v1/clusters/${clusterId}/terminal` });
      expect(plain.statusCode).toBe(426);
    }, 240_000);
  },
);
