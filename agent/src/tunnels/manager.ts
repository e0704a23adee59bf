import type { CommandBody } from '@anvil/shared/protocol';
import type Dockerode from 'dockerode';
import type { Logger } from 'pino';
import type { WebSocket } from 'ws';
import type { HostCredential } from '../connection/credential-store.ts';
import { errorMessage } from '../errors.ts';
import { createExec, joinExec, startExec } from './exec.ts';
import { dialTunnel } from './socket.ts';
import { connectTcp, joinStream } from './stream.ts';
import { findTunnelContainer } from './target.ts';
import { tunnelUrl } from './url.ts';

export type OpenTunnelCommand = Extract<CommandBody, { name: 'open_tunnel' }>;

export interface TunnelManagerOptions {
  /** The engine the containers run on; without one, tunnels are refused. */
  docker: Dockerode | null;
  controlPlaneUrl: string;
  logger: Logger;
  /** Connecting the container's port and dialling the tunnel socket, each. */
  connectTimeoutMs?: number;
}

/**
 * Opens the reverse tunnels the control plane asks for (`open_tunnel`) and keeps them until either end
 * closes. Each tunnel is its own WebSocket, independent of the agent's connection: a reconnect of the
 * main connection does not cut a terminal session or a proxied download.
 */
export class TunnelManager {
  readonly #open = new Set<WebSocket>();
  #stopped = false;

  constructor(private readonly o: TunnelManagerOptions) {}

  get openCount(): number {
    return this.#open.size;
  }

  /** Resolves once the tunnel socket is open (the command's reply); rejects with a readable reason. */
  async open(command: OpenTunnelCommand, credential: HostCredential): Promise<{ tunnelId: string }> {
    if (this.#stopped) throw new Error('the agent is stopping');
    const docker = this.o.docker;
    if (!docker) throw new Error('this agent has no Docker client for tunnels');
    const timeoutMs = this.o.connectTimeoutMs ?? 10_000;
    const logger = this.o.logger.child({ tunnelId: command.tunnelId, workloadId: command.workloadId });
    const container = await findTunnelContainer(docker, credential.hostId, command.workloadId);
    const dial = () =>
      dialTunnel({
        url: tunnelUrl(this.o.controlPlaneUrl),
        hostId: credential.hostId,
        credential: credential.credential,
        tunnelId: command.tunnelId,
        token: command.token,
        timeoutMs,
      });
    const target = command.target;
    if (target.kind === 'stream') {
      if (!container.ipAddress) {
        throw new Error(`workload ${command.workloadId}'s container has no address on a Docker network`);
      }
      // The port first: a refused port is the command's error, before any socket is dialled.
      const tcp = await connectTcp(container.ipAddress, target.port, timeoutMs);
      let ws: WebSocket;
      try {
        ws = await dial();
      } catch (error) {
        tcp.destroy();
        throw error;
      }
      this.#track(ws, joinStream(ws, tcp), logger, { port: target.port });
    } else {
      const exec = await createExec(docker, container.id, target);
      const ws = await dial();
      let stream: Awaited<ReturnType<typeof startExec>>;
      try {
        stream = await startExec(exec, target);
      } catch (error) {
        ws.terminate();
        throw error;
      }
      this.#track(ws, joinExec(ws, docker, container.id, exec, stream, target, logger), logger, {
        command: target.command[0],
        tty: target.tty,
      });
    }
    return { tunnelId: command.tunnelId };
  }

  #track(ws: WebSocket, done: Promise<void>, logger: Logger, details: Record<string, unknown>): void {
    this.#open.add(ws);
    logger.debug(details, 'tunnel open');
    void done
      .catch((error: unknown) => logger.warn({ err: errorMessage(error) }, 'tunnel failed'))
      .finally(() => {
        this.#open.delete(ws);
        logger.debug(details, 'tunnel closed');
      });
  }

  /** Closes every tunnel (the agent is stopping): their TCP connections close, exec'd processes are killed. */
  closeAll(): void {
    this.#stopped = true;
    for (const ws of this.#open) ws.terminate();
  }
}
