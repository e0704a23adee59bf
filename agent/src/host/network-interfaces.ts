import { readdir, readFile, realpath } from 'node:fs/promises';
import { networkInterfaces as osNetworkInterfaces } from 'node:os';
import type { NetworkInterfaceInventory } from '@anvil/shared/protocol';
import type { Static } from '@sinclair/typebox';
import { isHostInterface, known } from './filters.ts';

type Nic = Static<typeof NetworkInterfaceInventory>;

async function readText(path: string): Promise<string | null> {
  try {
    return (await readFile(path, 'utf8')).trim();
  } catch {
    return null;
  }
}

/**
 * The host's network interfaces from the kernel (os.networkInterfaces for addresses, sysfs for the MAC,
 * link speed and whether the device is virtual), read asynchronously. Not systeminformation's
 * networkInterfaces: it runs a shell per interface synchronously, which on a host with many container
 * networks blocked the agent's event loop (heartbeats, tunnel commands) for tens of seconds.
 */
export async function networkInterfaceInventory(sysClassNet = '/sys/class/net'): Promise<Nic[]> {
  const addresses = osNetworkInterfaces();
  const listed = await readdir(sysClassNet).catch(() => [] as string[]);
  const names = [...new Set([...listed, ...Object.keys(addresses)])].filter(isHostInterface).sort();
  return Promise.all(
    names.map(async (name) => {
      const own = addresses[name] ?? [];
      const dir = `${sysClassNet}/${name}`;
      const [address, speed, device] = await Promise.all([
        readText(`${dir}/address`),
        readText(`${dir}/speed`),
        realpath(dir).catch(() => null),
      ]);
      const mac = own.find((a) => a.mac && a.mac !== '00:00:00:00:00:00')?.mac ?? address;
      const mbps = speed === null ? Number.NaN : Number(speed);
      return {
        name,
        mac: mac && mac !== '00:00:00:00:00:00' ? mac : null,
        ipv4: own.filter((a) => a.family === 'IPv4').map((a) => a.address),
        ipv6: own.filter((a) => a.family === 'IPv6').map((a) => a.address),
        // -1 (no link) and unreadable speeds are unknown, not zero.
        speedMbps: known(Number.isFinite(mbps) && mbps > 0 ? mbps : null),
        // Physical devices link under /sys/devices/pci…; bridges, veths, tunnels under /sys/devices/virtual.
        virtual: device === null ? null : device.includes('/devices/virtual/'),
      };
    }),
  );
}
