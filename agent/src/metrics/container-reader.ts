import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { ContainerMetrics } from '@anvil/shared/protocol';
import type { Logger } from 'pino';
import type { ContainerRuntime } from '../docker/runtime.ts';
import { errorMessage } from '../errors.ts';
import {
  parseMeminfo,
  parseMountinfo,
  parseNetDev,
  parseProcStat,
  readKernelFile,
  USER_HZ,
} from '../host/procfs.ts';
import type { RunningContainer } from '../reconcile/reconciler.ts';
import {
  type CgroupMounts,
  cgroupMounts,
  locateCgroupDirs,
  parseProcCgroup,
  readCgroupCounters,
} from './cgroup.ts';
import {
  type ContainerCounters,
  type CpuCounters,
  containerMetrics,
  countersFromDockerStats,
} from './container-stats.ts';

export interface ContainerStatsReaderOptions {
  runtime: ContainerRuntime;
  logger: Logger;
  /**
   * Where this machine's procfs is mounted, when the containers run on this machine (Docker reached
   * through a local socket): their cgroup files are read directly. null: every container through
   * Docker's stats endpoint.
   */
  procRoot: string | null;
}

/** How one container is read: through its init process's cgroups here, or through Docker. */
type Source = { kind: 'cgroup'; pid: number; ownNetwork: boolean } | { kind: 'docker' };

/** The host's CPU time as Docker computes `system_cpu_usage`, read once per round. */
interface SystemCpu {
  systemNs: number;
  onlineCpus: number;
}

/** Whether DOCKER_HOST names this machine's engine (its containers' processes are visible here). */
export function dockerIsLocal(env: Record<string, string | undefined>): boolean {
  const host = env['DOCKER_HOST'];
  return !host || host.startsWith('unix://');
}

/**
 * Per-container metrics each sampling round. Docker's stats endpoint costs a request per container
 * (and dockerd reads the same cgroup files to answer it): where the container's processes are visible
 * here, its cgroup files and its network namespace's /proc/<pid>/net/dev are read directly instead, a
 * few small reads. The init pid comes from one inspect, kept while /proc/<pid>/cgroup still names the
 * container (a restart gives a new pid). A container whose cgroups cannot be read here (remote engine,
 * Docker in a VM, a layout we cannot read) is read through Docker for as long as it runs.
 */
export class ContainerStatsReader {
  readonly #o: ContainerStatsReaderOptions;
  readonly #sources = new Map<string, Source>();
  readonly #cpu = new Map<string, CpuCounters>();
  /** undefined: not read yet; null: none (this machine has no cgroup mounts we can use). */
  #mounts: CgroupMounts | null | undefined;
  #memTotal: number | null | undefined;

  constructor(options: ContainerStatsReaderOptions) {
    this.#o = options;
  }

  async read(running: RunningContainer[]): Promise<ContainerMetrics[]> {
    const system = running.length > 0 ? this.#systemCpu() : null;
    const results = await Promise.all(running.map((c) => this.#one(c, system)));
    const live = new Set(running.map((r) => r.containerId));
    for (const id of [...this.#cpu.keys()]) if (!live.has(id)) this.#cpu.delete(id);
    for (const id of [...this.#sources.keys()]) if (!live.has(id)) this.#sources.delete(id);
    return results.filter((m): m is ContainerMetrics => m !== null);
  }

  async #one(
    { containerId, workloadId }: RunningContainer,
    system: SystemCpu | null,
  ): Promise<ContainerMetrics | null> {
    try {
      const counters = await this.#counters(containerId, system);
      if (!counters) return null;
      const { metrics, cpu } = containerMetrics(
        workloadId,
        containerId,
        counters,
        this.#cpu.get(containerId) ?? null,
      );
      if (cpu) this.#cpu.set(containerId, cpu);
      return metrics;
    } catch (err) {
      this.#o.logger.debug({ containerId, err: errorMessage(err) }, 'container stats failed');
      return null;
    }
  }

  async #counters(id: string, system: SystemCpu | null): Promise<ContainerCounters | null> {
    const cached = this.#sources.get(id);
    if (cached?.kind !== 'docker' && system && this.#cgroupMounts()) {
      if (cached) {
        const counters = this.#fromCgroup(id, cached, system);
        if (counters) return counters;
      }
      // Not seen yet, or the cached pid is stale (the container restarted): look the pid up.
      const source = await this.#resolve(id);
      if (!source) {
        this.#sources.delete(id);
        return null;
      }
      const counters = this.#fromCgroup(id, source, system);
      this.#sources.set(id, counters ? source : { kind: 'docker' });
      if (counters) return counters;
      this.#o.logger.debug({ containerId: id }, 'container cgroup not readable here; asking Docker');
    }
    const stats = await this.#o.runtime.stats(id);
    return stats ? countersFromDockerStats(stats) : null;
  }

  /** The container's init pid and network mode; null when it no longer runs. */
  async #resolve(id: string): Promise<{ kind: 'cgroup'; pid: number; ownNetwork: boolean } | null> {
    const details = await this.#o.runtime.inspect(id);
    const pid = details?.State?.Pid ?? 0;
    if (!details?.State?.Running || pid <= 0) return null;
    const mode = details.HostConfig?.NetworkMode ?? '';
    // Docker reports no interfaces for these modes: the container has no network namespace of its own.
    const ownNetwork = !(mode === 'host' || mode === 'none' || mode.startsWith('container:'));
    return { kind: 'cgroup', pid, ownNetwork };
  }

  /** null: this pid is not (or no longer) the container's, or its files cannot be read. */
  #fromCgroup(
    id: string,
    source: { pid: number; ownNetwork: boolean },
    system: SystemCpu,
  ): ContainerCounters | null {
    const procDir = join(this.#o.procRoot!, String(source.pid));
    const membership = readKernelFile(join(procDir, 'cgroup'));
    // Docker names every container's cgroup after its id (cgroupfs and systemd drivers alike).
    if (!membership?.includes(id)) return null;
    try {
      const dirs = locateCgroupDirs(parseProcCgroup(membership), this.#cgroupMounts()!);
      const counters = readCgroupCounters(dirs, readKernelFile);
      let network: ContainerCounters['network'] = null;
      if (source.ownNetwork) {
        const net = readKernelFile(join(procDir, 'net', 'dev'));
        if (net === null) throw new Error(`cannot read ${join(procDir, 'net', 'dev')}`);
        for (const n of parseNetDev(net)) {
          if (n.interface === 'lo') continue;
          network ??= { rxBytes: 0, txBytes: 0 };
          network.rxBytes += n.rxBytes;
          network.txBytes += n.txBytes;
        }
      }
      const memTotal = this.#machineMemory();
      const limit = counters.memoryLimitBytes;
      return {
        cpuTotalNs: counters.cpuTotalNs,
        systemCpuNs: system.systemNs,
        onlineCpus: system.onlineCpus,
        memoryUsageBytes: counters.memoryUsageBytes,
        memoryInactiveFileBytes: counters.memoryInactiveFileBytes,
        // As Docker: no limit, or one above the machine's memory, reads as the machine's memory.
        memoryLimitBytes: memTotal !== null && (limit === null || limit > memTotal) ? memTotal : limit,
        network,
        blockReadBytes: counters.blockReadBytes,
        blockWriteBytes: counters.blockWriteBytes,
      };
    } catch (err) {
      // The process may have exited between the reads; only a live one proves the layout unreadable.
      if (existsSync(procDir))
        this.#o.logger.debug({ containerId: id, err: errorMessage(err) }, 'cgroup files unreadable');
      return null;
    }
  }

  #systemCpu(): SystemCpu | null {
    if (this.#o.procRoot === null) return null;
    const text = readKernelFile(join(this.#o.procRoot, 'stat'));
    const stat = text === null ? null : parseProcStat(text);
    if (!stat || stat.onlineCpus === 0) return null;
    return { systemNs: (stat.dockerSystemTicks * 1e9) / USER_HZ, onlineCpus: stat.onlineCpus };
  }

  /** Mounts do not move under a running agent: read once. */
  #cgroupMounts(): CgroupMounts | null {
    if (this.#mounts !== undefined) return this.#mounts;
    const text = readKernelFile(join(this.#o.procRoot!, 'self', 'mountinfo'));
    const mounts = text === null ? null : cgroupMounts(parseMountinfo(text));
    this.#mounts = mounts && (mounts.v2 || mounts.v1.size > 0) ? mounts : null;
    return this.#mounts;
  }

  /** Docker caps limits at the machine's memory, which it reads once at start; so do we. */
  #machineMemory(): number | null {
    if (this.#memTotal !== undefined) return this.#memTotal;
    const text = readKernelFile(join(this.#o.procRoot!, 'meminfo'));
    this.#memTotal = (text === null ? null : parseMeminfo(text).get('MemTotal')) ?? null;
    return this.#memTotal;
  }
}
