import { join } from 'node:path';
import type { WorkloadSpec } from '@anvil/shared/protocol';
import type { ContainerCreateOptions } from 'dockerode';
import { downloadPath } from '../reconcile/download-cache.ts';
import { containerName, isOwnLabel, LABELS, type SpecContext } from './labels.ts';

/** Where a workload's volume lives on the host. */
export function volumeDir(volumeRoot: string, workloadId: string): string {
  return join(volumeRoot, workloadId);
}

/**
 * The GPU env the NVIDIA toolkit reads. `void` when no GPU is assigned: CUDA base images set
 * NVIDIA_VISIBLE_DEVICES=all, which on a host whose default runtime is nvidia would hand the
 * container every GPU. Set last, so a workload's own env cannot widen its GPU set.
 */
function gpuEnv(spec: WorkloadSpec): string {
  return `NVIDIA_VISIBLE_DEVICES=${spec.gpus.length > 0 ? spec.gpus.map((g) => g.uuid).join(',') : 'void'}`;
}

/** Translate a workload spec into Docker's create body. Pure, so it is tested without Docker. */
export function buildCreateOptions(
  spec: WorkloadSpec,
  context: SpecContext & { specHash: string },
): ContainerCreateOptions {
  // Secret variables (filled by the control plane, not part of the spec hash) win over plain ones.
  const merged = { ...spec.env, ...spec.secretEnv };
  const env = Object.entries(merged)
    .filter(([key]) => key !== 'NVIDIA_VISIBLE_DEVICES')
    .map(([key, value]) => `${key}=${value}`);
  env.push(gpuEnv(spec));

  const labels: Record<string, string> = {};
  for (const [key, value] of Object.entries(spec.labels)) if (!isOwnLabel(key)) labels[key] = value;
  labels[LABELS.managed] = 'true';
  labels[LABELS.workload] = spec.workloadId;
  labels[LABELS.host] = context.hostId;
  labels[LABELS.specHash] = context.specHash;
  labels[LABELS.stopGrace] = String(spec.stopGraceSeconds);

  const exposedPorts: Record<string, object> = {};
  const portBindings: Record<string, { HostIp: string; HostPort: string }[]> = {};
  for (const port of spec.ports) {
    const key = `${port.containerPort}/${port.protocol}`;
    exposedPorts[key] = {};
    // An empty HostPort asks Docker for a free one; the chosen port is read back by inspect.
    const bindings = portBindings[key] ?? [];
    portBindings[key] = bindings;
    bindings.push({
      HostIp: port.hostIp ?? '',
      HostPort: port.hostPort ? String(port.hostPort) : '',
    });
  }

  const hostConfig: NonNullable<ContainerCreateOptions['HostConfig']> = {
    RestartPolicy: {
      Name: spec.restartPolicy.name,
      MaximumRetryCount: spec.restartPolicy.name === 'on-failure' ? spec.restartPolicy.maxRetries : 0,
    },
    PortBindings: portBindings,
  };
  if (spec.cpus !== null) hostConfig.NanoCpus = Math.round(spec.cpus * 1e9);
  if (spec.memoryBytes !== null) {
    hostConfig.Memory = spec.memoryBytes;
    // Equal to Memory: the limit is the limit, not a licence to swap as much again.
    hostConfig.MemorySwap = spec.memoryBytes;
  }
  if (spec.shmBytes !== null) hostConfig.ShmSize = spec.shmBytes;
  const binds: string[] = [];
  if (spec.volume)
    binds.push(`${volumeDir(context.volumeRoot, spec.workloadId)}:${spec.volume.containerPath}`);
  for (const download of spec.downloads ?? []) {
    if (!context.downloadRoot)
      throw new Error(`workload ${spec.workloadId} has downloads but no download cache`);
    binds.push(`${downloadPath(context.downloadRoot, download.sha256)}:${download.containerPath}:ro`);
  }
  if (binds.length > 0) hostConfig.Binds = binds;
  if (context.gpuMode === 'device-requests' && spec.gpus.length > 0) {
    hostConfig.DeviceRequests = [
      { Driver: 'nvidia', DeviceIDs: spec.gpus.map((g) => g.uuid), Capabilities: [['gpu']], Count: 0 },
    ];
  }

  const options: ContainerCreateOptions = {
    name: containerName(spec.workloadId),
    Image: spec.image,
    Env: env,
    Labels: labels,
    ExposedPorts: exposedPorts,
    // Also used by dockerd itself when it shuts down with the container running.
    StopTimeout: spec.stopGraceSeconds,
    HostConfig: hostConfig,
  };
  if (spec.command) options.Cmd = spec.command;
  if (spec.entrypoint) options.Entrypoint = spec.entrypoint;
  return options;
}
