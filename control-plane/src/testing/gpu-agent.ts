import { newId } from '@anvil/shared';
import {
  AGENT_CONNECT_PATH,
  createMessage,
  type GpuHealth,
  type GpuHealthReason,
  type GpuMetrics,
  type Inventory,
} from '@anvil/shared/protocol';
import { WebSocket } from 'ws';
import type { TestApp } from './app.ts';
import { waitFor } from './wait.ts';

/**
 * A hand-driven agent with real (not simulated) GPUs for tests of GPU health, the NVIDIA runtime gate and
 * the board catalogue: it registers with a fresh join token and says hello over the real WebSocket, as
 * the agent does, then sends what the test tells it (metric samples carrying NVML health, inventories).
 * It never runs a container.
 */
export interface GpuTestAgent {
  hostId: string;
  inventory: Inventory;
  /** Every message the control plane sent it, in order. */
  received: readonly Record<string, unknown>[];
  send(message: object): void;
  /** One metrics sample with these GPUs. */
  sendGpus(gpus: GpuMetrics[]): void;
  close(): void;
}

export interface TestGpu {
  name: string;
  migEnabled?: boolean;
}

/** An inventory of real GPUs as NVML reports them; Docker with or without the NVIDIA runtime. */
export function realGpuInventory(gpus: TestGpu[], nvidiaRuntime: boolean): Inventory {
  return {
    host: {
      hostname: `gpu-${newId('wl').slice(-6)}`,
      os: { platform: 'linux', distro: null, release: null, kernel: null, arch: 'x64' },
      cpu: { model: null, cores: 64, threads: 64 },
      memoryBytes: 512 * 1024 ** 3,
      disks: [{ device: '/dev/nvme0n1', mount: '/', fsType: 'ext4', sizeBytes: 4000 * 1024 ** 3 }],
      networkInterfaces: [],
    },
    gpus: {
      simulated: false,
      source: 'nvml',
      driverVersion: '550.54.15',
      cudaVersion: '12.4',
      devices: gpus.map((d, index) => ({
        index,
        uuid: `GPU-${newId('wl').slice(-12)}-${index}`,
        name: d.name,
        memoryTotalBytes: 80 * 1024 ** 3,
        pciBusId: `00000000:${String(index + 10)}:00.0`,
        ...(d.migEnabled === undefined ? {} : { migEnabled: d.migEnabled }),
      })),
      error: null,
    },
    docker: {
      version: '24.0.7',
      apiVersion: '1.43',
      runtimes: nvidiaRuntime
        ? ['io.containerd.runc.v2', 'nvidia', 'runc']
        : ['io.containerd.runc.v2', 'runc'],
      nvidiaRuntime,
      error: null,
    },
  };
}

export function healthReason(code: string, severity: 'degraded' | 'failed', source: string): GpuHealthReason {
  return { code, severity, message: `${code} seen`, source, since: Date.now() };
}

/** A health verdict with plausible evidence (3 corrected ECC errors; 2 uncorrected when failed). */
export function gpuHealth(
  state: GpuHealth['state'],
  reasons: GpuHealthReason[] = [],
  xids: number[] = [],
): GpuHealth {
  return {
    state,
    reasons,
    ecc: {
      volatileCorrected: 3,
      volatileUncorrected: state === 'failed' ? 2 : 0,
      aggregateCorrected: 7,
      aggregateUncorrected: 0,
    },
    retiredPages: null,
    rowRemap: { correctable: 0, uncorrectable: 0, pending: false, failure: false },
    throttleReasons: [],
    slowdownTemperatureC: 90,
    pcie: { currentGen: 5, maxGen: 5, currentWidth: 16, maxWidth: 16 },
    xids: xids.map((xid) => ({ xid, at: Date.now() })),
  };
}

/** A GPU reading of the inventory's GPU `index`: 42 % busy, 2 MiB used, 61 °C, 305 W. */
export function gpuSample(inventory: Inventory, index: number, health: GpuHealth | undefined): GpuMetrics {
  return {
    index,
    uuid: inventory.gpus.devices[index]!.uuid,
    utilizationPercent: 42,
    memoryUtilizationPercent: 10,
    memoryUsedBytes: 2 * 1_048_576,
    memoryTotalBytes: 80 * 1024 ** 3,
    temperatureC: 61,
    powerWatts: 305,
    smClockMhz: 1980,
    memoryClockMhz: 2619,
    processes: [],
    ...(health ? { health } : {}),
  };
}

/** Registers and says hello with `inventory` on the app listening at `url`; resolves once welcomed. */
export async function connectGpuAgent(t: TestApp, url: string, inventory: Inventory): Promise<GpuTestAgent> {
  const { value } = await t.context.fleet.joinTokens.create({ userId: t.userId, keyId: null }, {});
  const ws = new WebSocket(`${url.replace(/^http/, 'ws')}${AGENT_CONNECT_PATH}`);
  const received: Record<string, unknown>[] = [];
  ws.on('message', (data) => received.push(JSON.parse(data.toString()) as Record<string, unknown>));
  await new Promise((resolve, reject) => {
    ws.once('open', resolve);
    ws.once('error', reject);
  });
  const send = (message: object) => ws.send(JSON.stringify(message));
  send(
    createMessage('register', { joinToken: value, hostname: inventory.host.hostname, agentVersion: 'test' }),
  );
  const registered = (await waitFor('registered', async () =>
    received.find((m) => m['type'] === 'registered'),
  )) as { hostId: string; credential: string };
  send(
    createMessage('hello', {
      agentVersion: 'test',
      hostId: registered.hostId,
      credential: registered.credential,
      inventory,
    }),
  );
  await waitFor('welcome', async () => received.find((m) => m['type'] === 'welcome'));
  return {
    hostId: registered.hostId,
    inventory,
    received,
    send,
    sendGpus: (gpus) =>
      send(
        createMessage('metric_batch', {
          samples: [{ at: Date.now(), host: null, gpus, containers: [] }],
          dropped: 0,
        }),
      ),
    close: () => ws.terminate(),
  };
}
