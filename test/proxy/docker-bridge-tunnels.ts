import { connect, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { ApiError } from '@anvil/shared';
import type Dockerode from 'dockerode';
import type { ExecSession, TunnelOpener } from '../../control-plane/src/fleet/tunnels/types.ts';

/**
 * TEST DOUBLE for the agents' reverse tunnels (contract 4, TunnelOpener): `net.connect` to the
 * container's address on the Docker bridge, found by its `anvil.workload=<id>` label. Used where a
 * test runs no agent; it carries the same bytes a real tunnel would, without the agent hop.
 */
export class DockerBridgeTunnels implements TunnelOpener {
  private readonly addresses = new Map<string, { ip: string; at: number }>();

  constructor(private readonly docker: Dockerode) {}

  async openStream(workloadId: string, port: number, options?: { signal?: AbortSignal }): Promise<Duplex> {
    const ip = await this.address(workloadId);
    return new Promise<Socket>((resolve, reject) => {
      const socket = connect({ host: ip, port });
      const abort = () => socket.destroy(new Error('aborted'));
      options?.signal?.addEventListener('abort', abort, { once: true });
      socket.once('connect', () => {
        options?.signal?.removeEventListener('abort', abort);
        resolve(socket);
      });
      socket.once('error', (error) => {
        this.addresses.delete(workloadId);
        reject(
          new ApiError('AGENT_COMMAND_FAILED', `connecting ${workloadId}:${port} failed: ${error.message}`),
        );
      });
    });
  }

  openExec(): Promise<ExecSession> {
    return Promise.reject(new Error('DockerBridgeTunnels (test double) does not implement openExec'));
  }

  private async address(workloadId: string): Promise<string> {
    const cached = this.addresses.get(workloadId);
    if (cached && Date.now() - cached.at < 5_000) return cached.ip;
    const [container] = await this.docker.listContainers({
      filters: { label: [`anvil.workload=${workloadId}`] },
    });
    if (!container) throw new ApiError('WORKLOAD_NOT_FOUND', `no running container for ${workloadId}`);
    const details = await this.docker.getContainer(container.Id).inspect();
    const ip =
      details.NetworkSettings.IPAddress ||
      Object.values(details.NetworkSettings.Networks ?? {}).find((n) => n.IPAddress)?.IPAddress;
    if (!ip) throw new ApiError('WORKLOAD_NOT_FOUND', `container of ${workloadId} has no address`);
    this.addresses.set(workloadId, { ip, at: Date.now() });
    return ip;
  }
}
