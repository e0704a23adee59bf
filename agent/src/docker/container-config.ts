import { join, resolve, sep } from 'node:path';
import { WORKER_API_HOST, type WorkloadSpec } from '@anvil/shared/protocol';
import type { ContainerCreateOptions } from 'dockerode';
import { networkNameOf, UNISOLATED_NETWORK } from '../network/account-networks.ts';
import { downloadPath } from '../reconcile/download-cache.ts';
import { containerName, isOwnLabel, LABELS, type SpecContext } from './labels.ts';

/**
 * The capabilities a container keeps; every other one (Docker's defaults included: NET_RAW, MKNOD,
 * SETFCAP, SETPCAP, SYS_CHROOT, AUDIT_WRITE, FSETID) is dropped. What an ordinary image run as root needs:
 * - CHOWN, FOWNER: package managers and archive extraction set owners, modes and times of files;
 * - DAC_OVERRIDE: root reading and writing files it does not own (most images assume it can);
 * - SETUID, SETGID: dropping to another user (gosu/su, apt's _apt sandbox, servers that switch users);
 * - KILL: signalling processes of another user inside the container (supervisors, init);
 * - NET_BIND_SERVICE: servers on ports below 1024 (nginx on 80, sshd on 22).
 * NET_RAW goes (raw sockets forge packets and ARP on the bridge); with no-new-privileges, setuid binaries
 * gain nothing either.
 */
export const CAPABILITIES_KEPT = [
  'CHOWN',
  'DAC_OVERRIDE',
  'FOWNER',
  'SETUID',
  'SETGID',
  'KILL',
  'NET_BIND_SERVICE',
] as const;

/** Processes (threads included) a container may hold when its spec names no limit: a fork bomb stops here. */
export const DEFAULT_PIDS_LIMIT = 4096;

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
  const workerApi = spec.workerApi && context.workerApi ? context.workerApi : null;
  if (spec.workerApi && workerApi) {
    for (const [name, path] of Object.entries(spec.workerApi.urlEnv))
      env.push(`${name}=http://${WORKER_API_HOST}:${workerApi.port}${path}`);
  }
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
  const direct = context.directPorts ?? null;
  for (const port of spec.ports) {
    const key = `${port.containerPort}/${port.protocol}`;
    exposedPorts[key] = {};
    // Customers reach ports through the proxy, SSH -L and tunnels (to the container's address). Only an
    // operator's direct-ports address publishes them, on a port Docker picks from the range and that
    // inspect reads back; the spec's own hostIp/hostPort are not honoured.
    if (!direct) continue;
    portBindings[key] = [{ HostIp: direct.address, HostPort: `${direct.first}-${direct.last}` }];
  }
  // A multi-host training gang's rendezvous port: the same port on the host's rendezvous address, which
  // the firewall admits only from the gang's other hosts (network/rendezvous-rules.ts).
  for (const port of spec.rendezvous?.publish ?? []) {
    if (!context.rendezvousAddress)
      throw new Error(
        `workload ${spec.workloadId} publishes rendezvous port ${port} but this host has no ANVIL_RENDEZVOUS_ADDRESS`,
      );
    exposedPorts[`${port}/tcp`] = {};
    portBindings[`${port}/tcp`] = [{ HostIp: context.rendezvousAddress, HostPort: String(port) }];
  }

  const hostConfig: NonNullable<ContainerCreateOptions['HostConfig']> = {
    RestartPolicy: {
      Name: spec.restartPolicy.name,
      MaximumRetryCount: spec.restartPolicy.name === 'on-failure' ? spec.restartPolicy.maxRetries : 0,
    },
    PortBindings: portBindings,
    NetworkMode: networkNameOf(spec) ?? UNISOLATED_NETWORK,
    CapDrop: ['ALL'],
    CapAdd: [...CAPABILITIES_KEPT],
    SecurityOpt: ['no-new-privileges:true'],
    PidsLimit: spec.pidsLimit ?? DEFAULT_PIDS_LIMIT,
  };
  // The engine's host gateway: the one host address the firewall lets containers reach, on that port only.
  if (workerApi) hostConfig.ExtraHosts = [`${WORKER_API_HOST}:host-gateway`];
  if (spec.cpus !== null) {
    const cpus = context.hostCpus ? Math.min(spec.cpus, context.hostCpus) : spec.cpus;
    hostConfig.NanoCpus = Math.round(cpus * 1e9);
  }
  if (spec.memoryBytes !== null) {
    hostConfig.Memory = spec.memoryBytes;
    // Equal to Memory: the limit is the limit, not a licence to swap as much again.
    hostConfig.MemorySwap = spec.memoryBytes;
  }
  if (spec.shmBytes !== null) hostConfig.ShmSize = spec.shmBytes;
  // The writable layer alone can never exceed the workload's whole disk; the volume is measured (metrics).
  if (context.storageQuota && spec.diskBytes) hostConfig.StorageOpt = { size: String(spec.diskBytes) };
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
  assertConfined(options, context);
  return options;
}

function within(root: string, path: string): boolean {
  const base = resolve(root);
  const full = resolve(path);
  return full === base || full.startsWith(`${base}${sep}`);
}

/**
 * The last word before Docker sees a create body: nothing in it may widen a container's reach onto the
 * host, whatever a spec (or a future change to this file) asks. Throws rather than repairs.
 */
export function assertConfined(
  options: ContainerCreateOptions,
  context: Pick<SpecContext, 'volumeRoot' | 'downloadRoot'>,
): void {
  const host = options.HostConfig ?? {};
  const refuse = (why: string) => {
    throw new Error(`refusing to create ${options.name ?? 'a container'}: ${why}`);
  };
  if (host.Privileged) refuse('privileged mode');
  const network = host.NetworkMode ?? '';
  if (!network.startsWith('anvil-acct-') && network !== UNISOLATED_NETWORK)
    refuse(`network mode ${JSON.stringify(network)} is neither an account network nor the default bridge`);
  for (const [mode, value] of [
    ['PID', host.PidMode],
    ['IPC', host.IpcMode],
    ['UTS', host.UTSMode],
    ['user namespace', host.UsernsMode],
  ] as const) {
    if (value === 'host' || (typeof value === 'string' && value.startsWith('container:')))
      refuse(`${mode} mode ${value}`);
  }
  if (!host.CapDrop?.includes('ALL')) refuse('capabilities not dropped');
  const extra = (host.CapAdd ?? []).filter(
    (c: string) => !(CAPABILITIES_KEPT as readonly string[]).includes(c),
  );
  if (extra.length > 0) refuse(`capabilities ${extra.join(', ')}`);
  if (!host.SecurityOpt?.includes('no-new-privileges:true')) refuse('no-new-privileges missing');
  if (!host.PidsLimit || host.PidsLimit <= 0) refuse('no PID limit');
  if ((host.Devices ?? []).length > 0) refuse('host devices');
  if ((host.Mounts ?? []).length > 0 || (host.VolumesFrom ?? []).length > 0) refuse('mounts outside Binds');
  for (const bind of host.Binds ?? []) {
    const source = bind.split(':')[0] ?? '';
    const roots = [context.volumeRoot, context.downloadRoot].filter((r): r is string => !!r);
    if (!roots.some((root) => within(root, source) && resolve(source) !== resolve(root)))
      refuse(`host path ${source} is outside the agent's volume and download directories`);
  }
  for (const bindings of Object.values(host.PortBindings ?? {})) {
    for (const b of bindings as { HostIp?: string }[]) {
      if (!b.HostIp || b.HostIp === '0.0.0.0' || b.HostIp === '::')
        refuse('a port published on every address');
    }
  }
}
