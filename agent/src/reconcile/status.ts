import type { WorkloadPhase, WorkloadStatus } from '@anvil/shared/protocol';
import type { ContainerDetails } from '../docker/runtime.ts';

/** Docker's zero time means "never". */
function time(value: string | undefined): string | null {
  return !value || value.startsWith('0001-01-01') ? null : value;
}

function phaseOf(state: ContainerDetails['State']): WorkloadPhase {
  if (state.Restarting) return 'exited'; // between two runs; Docker brings it back
  if (state.Running) return 'running';
  if (state.Status === 'created') return 'pending';
  return 'exited';
}

function ipAddress(details: ContainerDetails): string | null {
  if (details.NetworkSettings.IPAddress) return details.NetworkSettings.IPAddress;
  for (const network of Object.values(details.NetworkSettings.Networks ?? {})) {
    if (network.IPAddress) return network.IPAddress;
  }
  return null;
}

function ports(details: ContainerDetails): WorkloadStatus['ports'] {
  const out: WorkloadStatus['ports'] = [];
  for (const [key, bindings] of Object.entries(details.NetworkSettings.Ports ?? {})) {
    const [port, protocol] = key.split('/');
    for (const b of bindings ?? []) {
      const hostPort = Number(b.HostPort);
      if (Number.isInteger(hostPort) && hostPort > 0) {
        out.push({ containerPort: Number(port), protocol: protocol ?? 'tcp', hostIp: b.HostIp, hostPort });
      }
    }
  }
  return out;
}

/** What Docker says about a workload's container, in the protocol's terms. */
export function statusFromInspect(workloadId: string, details: ContainerDetails, at: number): WorkloadStatus {
  const state = details.State;
  const phase = phaseOf(state);
  const error = state.OOMKilled ? 'killed: out of memory' : state.Error ? state.Error : null;
  return {
    workloadId,
    phase,
    containerId: details.Id,
    containerState: state.Status,
    exitCode: phase === 'running' || phase === 'pending' ? null : state.ExitCode,
    error,
    startedAt: time(state.StartedAt),
    finishedAt: phase === 'running' ? null : time(state.FinishedAt),
    restartCount: details.RestartCount ?? null,
    ipAddress: phase === 'running' ? ipAddress(details) : null,
    ports: phase === 'running' ? ports(details) : [],
    at,
  };
}

/** A workload with no container (yet, or because it failed before one existed). */
export function statusWithoutContainer(
  workloadId: string,
  phase: WorkloadPhase,
  error: string | null,
  at: number,
): WorkloadStatus {
  return {
    workloadId,
    phase,
    containerId: null,
    containerState: null,
    exitCode: null,
    error,
    startedAt: null,
    finishedAt: null,
    restartCount: null,
    ipAddress: null,
    ports: [],
    at,
  };
}
