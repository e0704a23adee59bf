import { gpuBoardOf } from '@anvil/shared';
import type { GpuHealthReason, GpuHealthState, Inventory } from '@anvil/shared/protocol';

/** The kept health of one GPU (host_gpu_health), as the host views read it. */
export interface GpuHealthRow {
  gpuIndex: number;
  gpuUuid: string;
  state: string;
  reasons: unknown;
  since: Date;
}

export interface GpuDeviceView {
  index: number;
  uuid: string;
  name: string;
  /** The board in the catalogue (shared/src/gpu-boards.ts), "H100 SXM"; null for a board not in it. */
  boardType: string | null;
  /** The API's gpu_type customers ask for to get this board; null when none can. */
  gpuType: string | null;
  /** null: the agent did not say (older agents, nvidia-smi without MIG support). */
  migEnabled: boolean | null;
  /** Offered to placement as a whole GPU: a known board, not in MIG mode, not failed, on a host that takes GPU work. */
  schedulable: boolean;
  /** The state kept since the last operator reset; null while the agent has sent no health for this GPU. */
  health: { state: GpuHealthState; reasons: GpuHealthReason[]; since: string } | null;
}

/** Whether the host is offered GPU work, and if not, what is missing and how to fix it. */
export interface GpuWork {
  offered: boolean;
  reason: string | null;
}

export const NVIDIA_RUNTIME_FIX =
  'install nvidia-container-toolkit, run `sudo nvidia-ctk runtime configure --runtime=docker`, then ' +
  '`sudo systemctl restart docker` and restart the agent (it reports the runtime in its inventory)';

/**
 * The same rule as the capacity index's OFFERS_GPU_WORK (scheduler/capacity.ts): simulated GPUs need
 * nothing; real ones need Docker's NVIDIA runtime, without which a container asking for a GPU cannot start.
 */
export function gpuWorkOf(inventory: Inventory | null): GpuWork {
  const gpus = inventory?.gpus;
  if (!gpus || gpus.devices.length === 0) {
    return {
      offered: false,
      reason: `no GPUs in the inventory${gpus?.error ? ` (${gpus.error})` : ''}`,
    };
  }
  if (gpus.simulated) return { offered: true, reason: null };
  const docker = inventory.docker;
  if (docker.error) {
    return {
      offered: false,
      reason: `Docker could not be queried (${docker.error}), so the NVIDIA container runtime is not known to be there: fix Docker, then ${NVIDIA_RUNTIME_FIX}`,
    };
  }
  if (!docker.nvidiaRuntime) {
    const runtimes = docker.runtimes.length > 0 ? docker.runtimes.join(', ') : 'none';
    return {
      offered: false,
      reason: `the host has NVIDIA GPUs but Docker has no NVIDIA container runtime (its runtimes: ${runtimes}), so no GPU work is placed here: ${NVIDIA_RUNTIME_FIX}`,
    };
  }
  return { offered: true, reason: null };
}

/** The inventory's GPUs with their board, MIG mode and kept health, in index order. */
export function gpuDevicesOf(inventory: Inventory | null, health: readonly GpuHealthRow[]): GpuDeviceView[] {
  const offered = gpuWorkOf(inventory).offered;
  const byIndex = new Map(health.map((h) => [h.gpuIndex, h]));
  return [...(inventory?.gpus?.devices ?? [])]
    .sort((a, b) => a.index - b.index)
    .map((device) => {
      const board = gpuBoardOf(device.name);
      const row = byIndex.get(device.index);
      // A row about another board at this index (the GPU was replaced) says nothing about this one.
      const kept = row && row.gpuUuid === device.uuid ? row : null;
      const migEnabled = device.migEnabled ?? null;
      return {
        index: device.index,
        uuid: device.uuid,
        name: device.name,
        boardType: board?.board ?? null,
        gpuType: board?.type ?? null,
        migEnabled,
        schedulable: offered && board !== null && migEnabled !== true && kept?.state !== 'failed',
        health: kept
          ? {
              state: kept.state as GpuHealthState,
              reasons: (kept.reasons ?? []) as GpuHealthReason[],
              since: kept.since.toISOString(),
            }
          : null,
      };
    });
}
