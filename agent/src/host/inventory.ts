import { hostname as osHostname } from 'node:os';
import type { HostInventory } from '@anvil/shared/protocol';
import si from 'systeminformation';
import { wrapError } from '../errors.ts';
import { isHostDisk, known } from './filters.ts';
import { networkInterfaceInventory } from './network-interfaces.ts';

type StaticFacts = [Awaited<ReturnType<typeof si.osInfo>>, Awaited<ReturnType<typeof si.cpu>>];
let staticFacts: StaticFacts | null = null;

/**
 * The operating system and CPU do not change while the agent runs, and reading them starts several
 * processes (lsb_release, lscpu...): read once, on the first success. Memory, disks and network
 * interfaces are read again for every inventory (each connection's hello).
 */
async function osAndCpu(): Promise<StaticFacts> {
  staticFacts ??= await Promise.all([si.osInfo(), si.cpu()]);
  return staticFacts;
}

/** CPU, memory, disks and network interfaces of this machine. */
export async function hostInventory(): Promise<HostInventory> {
  try {
    const [[os, cpu], mem, disks, nics] = await Promise.all([
      osAndCpu(),
      si.mem(),
      si.fsSize(),
      networkInterfaceInventory(),
    ]);
    const model = [cpu.manufacturer, cpu.brand].filter((s) => s && s !== 'unknown').join(' ');
    return {
      hostname: os.hostname || osHostname(),
      os: {
        platform: os.platform,
        distro: known(os.distro),
        release: known(os.release),
        kernel: known(os.kernel),
        arch: os.arch,
      },
      cpu: { model: known(model), cores: known(cpu.physicalCores), threads: known(cpu.cores) },
      memoryBytes: known(mem.total),
      disks: disks
        .filter((d) => isHostDisk(d.type, d.mount))
        .map((d) => ({ device: d.fs, mount: d.mount, fsType: known(d.type), sizeBytes: known(d.size) })),
      networkInterfaces: nics,
    };
  } catch (err) {
    throw wrapError('host inventory', err);
  }
}
