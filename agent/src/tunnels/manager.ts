import type { Socket } from 'node:net';
import { type CommandBody, TUNNEL_UPGRADE } from '@anvil/shared/protocol';
import type Dockerode from 'dockerode';
import type { Logger } from 'pino';
import type { WebSocket } from 'ws';
import type { HostCredential } from '../connection/credential-store.ts';
import { insecureControlPlaneRefusal } from '../connection/url.ts';
import { errorMessage } from '../errors.ts';
import type { VolumeFiles } from '../files/volume-files.ts';
import { createExec, joinExec, startExec } from './exec.ts';
import { pipeSockets, reset } from './pipe.ts';
import { dialTunnel } from './socket.ts';
import { connectTcp, joinStream } from './stream.ts';
import { findTunnelContainer } from './target.ts';
import { dialUpgrade } from './upgrade.ts';
import { tunnelUrl } from './url.ts';

export type OpenTunnelCommand = Extract<CommandBody, { name: 'open_tunnel' }>;

export interface TunnelManagerOptions {
  /** The engine the containers run on; without one, tunnels are refused. */
  docker: Dockerode | null;
  controlPlaneUrl: string;
  /** Whether plain ws:// off loopback is allowed (--allow-insecure-control-plane), for a command's dialUrl too. */
  allowInsecure?: boolean;
  logger: Logger;
  /** Files of workloads' volumes, for file targets; without it they are refused. */
  files?: VolumeFiles;
  /** Connecting the container's port and dialling the tunnel socket, each. */
  connectTimeoutMs?: number;
}

/**
 * Opens the reverse tunnels the control plane asks for (`open_tunnel`) and keeps them until either end
 * closes. Each tunnel is its own connection, independent of the agent's: a reconnect of the main
 * connection does not cut a terminal session or a proxied download. A stream tunnel the control plane
 * offers as a raw upgrade is a plain socket joined to the container's; the rest are WebSockets.
 */
export class TunnelManager {
  /** How to tear down each open tunnel. */
  readonly #open = new Set<() => void>();
  #stopped = false;

  constructor(private readonly o: TunnelManagerOptions) {}

  get openCount(): number {
    return this.#open.size;
  }

  /** Resolves once the tunnel socket is open (the command's reply); rejects with a readable reason. */
  async open(command: OpenTunnelCommand, credential: HostCredential): Promise<{ tunnelId: string }> {
    if (this.#stopped) throw new Error('the agent is stopping');
    if (command.target.kind === 'file') return this.#openFile(command, command.target, credential);
    const docker = this.o.docker;
    if (!docker) throw new Error('this agent has no Docker client for tunnels');
    const timeoutMs = this.o.connectTimeoutMs ?? 10_000;
    const logger = this.o.logger.child({ tunnelId: command.tunnelId, workloadId: command.workloadId });
    const base = command.dialUrl ?? this.o.controlPlaneUrl;
    if (command.dialUrl) {
      // The host credential travels with the tunnel: the same rule as for the control plane's own URL.
      const refusal = insecureControlPlaneRefusal(command.dialUrl, this.o.allowInsecure ?? false);
      if (refusal) throw new Error(`tunnel dial address refused: ${refusal}`);
    }
    const container = await findTunnelContainer(docker, credential.hostId, command.workloadId);
    const tunnelDial = {
      url: tunnelUrl(base),
      hostId: credential.hostId,
      credential: credential.credential,
      tunnelId: command.tunnelId,
      token: command.token,
      timeoutMs,
    };
    const dial = () => dialTunnel(tunnelDial);
    const target = command.target;
    if (target.kind === 'stream') {
      if (!container.ipAddress) {
        throw new Error(`workload ${command.workloadId}'s container has no address on a Docker network`);
      }
      // The port first: a refused port is the command's error, before any socket is dialled.
      const tcp = await connectTcp(container.ipAddress, target.port, timeoutMs);
      // Nothing reads the connection while the tunnel is dialled (what the container sends at once waits
      // in its buffer), but a reset meanwhile must not be an uncaught error.
      const early = () => {};
      tcp.on('error', early);
      if (target.upgrade === TUNNEL_UPGRADE) {
        let tunnel: Socket;
        try {
          tunnel = await dialUpgrade(tunnelDial);
        } catch (error) {
          tcp.destroy();
          throw error;
        }
        tcp.off('error', early);
        this.#trackRaw(tunnel, tcp, logger, target.port);
        return { tunnelId: command.tunnelId };
      }
      let ws: WebSocket;
      try {
        ws = await dial();
      } catch (error) {
        tcp.destroy();
        throw error;
      }
      tcp.off('error', early);
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

  /**
   * A file target: the file is opened (inside the workload's volume, or refused) and its digest checked
   * before the tunnel is dialled, so a refusal is the command's error; then its bytes go out and the
   * socket ends. The container need not run: artifacts outlive it.
   */
  async #openFile(
    command: OpenTunnelCommand,
    target: Extract<OpenTunnelCommand['target'], { kind: 'file' }>,
    credential: HostCredential,
  ): Promise<{ tunnelId: string }> {
    if (!this.o.files) throw new Error('this agent serves no volume files');
    const logger = this.o.logger.child({ tunnelId: command.tunnelId, workloadId: command.workloadId });
    const file = await this.o.files.open(command.workloadId, target.path, target.sha256 !== null);
    let tunnel: Socket;
    try {
      if (target.sha256 !== null && file.sha256 !== target.sha256) {
        throw new Error(
          `${target.path} changed since it was looked at (its SHA-256 is no longer the one asked for)`,
        );
      }
      if (target.offset > file.sizeBytes)
        throw new Error(`offset ${target.offset} is past the end of ${target.path}`);
      tunnel = await dialUpgrade({
        url: tunnelUrl(this.o.controlPlaneUrl),
        hostId: credential.hostId,
        credential: credential.credential,
        tunnelId: command.tunnelId,
        token: command.token,
        timeoutMs: this.o.connectTimeoutMs ?? 10_000,
      });
    } catch (error) {
      await file.close();
      throw error;
    }
    const length = target.length === null ? null : Math.min(target.length, file.sizeBytes - target.offset);
    const source = length === 0 ? null : file.stream(target.offset, length);
    const close = () => {
      source?.destroy();
      reset(tunnel);
    };
    this.#open.add(close);
    logger.debug({ path: target.path, offset: target.offset, length }, 'file tunnel open');
    let finished = false;
    const finish = (error: Error | null) => {
      if (finished) return;
      finished = true;
      this.#open.delete(close);
      void file.close().catch(() => {});
      if (error) {
        logger.warn({ path: target.path, err: error.message }, 'file tunnel failed');
        // A reset, never a clean end: the control plane must not take a cut file for a whole one.
        reset(tunnel);
      } else {
        logger.debug({ path: target.path, bytes: tunnel.bytesWritten }, 'file tunnel closed');
      }
    };
    tunnel.on('error', (error) => {
      source?.destroy();
      finish(error);
    });
    tunnel.once('close', () => {
      source?.destroy();
      finish(tunnel.writableFinished ? null : new Error('the control plane closed the tunnel early'));
    });
    // Nothing comes from the control plane on a file tunnel but its FIN once it has every byte (or gave up).
    tunnel.once('end', () => tunnel.destroy());
    tunnel.resume();
    if (!source) {
      tunnel.end(() => finish(null));
    } else {
      source.once('error', (error) => finish(error));
      source.once('end', () => tunnel.end());
      tunnel.once('finish', () => finish(null));
      source.pipe(tunnel, { end: false });
    }
    return { tunnelId: command.tunnelId };
  }

  #track(ws: WebSocket, done: Promise<void>, logger: Logger, details: Record<string, unknown>): void {
    const close = () => ws.terminate();
    this.#open.add(close);
    logger.debug(details, 'tunnel open');
    void done
      .catch((error: unknown) => logger.warn({ err: errorMessage(error) }, 'tunnel failed'))
      .finally(() => {
        this.#open.delete(close);
        logger.debug(details, 'tunnel closed');
      });
  }

  #trackRaw(tunnel: Socket, tcp: Socket, logger: Logger, port: number): void {
    // Reset, not closed: the control plane must not take a tunnel cut by the agent's stop for a whole stream.
    const close = () => {
      reset(tunnel);
      reset(tcp);
    };
    this.#open.add(close);
    logger.debug({ port, transport: 'raw' }, 'tunnel open');
    void pipeSockets(tunnel, tcp).then(({ bytesIn, bytesOut, error }) => {
      this.#open.delete(close);
      if (error) logger.warn({ port, err: error, bytesIn, bytesOut }, 'tunnel failed');
      else logger.debug({ port, bytesIn, bytesOut }, 'tunnel closed');
    });
  }

  /** Closes every tunnel (the agent is stopping): their TCP connections close, exec'd processes are killed. */
  closeAll(): void {
    this.#stopped = true;
    for (const close of this.#open) close();
  }
}
