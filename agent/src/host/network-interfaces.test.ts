import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { networkInterfaceInventory } from './network-interfaces.ts';

describe('network interfaces from sysfs', () => {
  const dirs: string[] = [];
  afterAll(async () => {
    for (const dir of dirs) await rm(dir, { recursive: true, force: true });
  });

  it('tells physical from virtual devices, reads MAC and speed, leaves out container veths', async () => {
    const root = await mkdtemp(join(tmpdir(), 'anvil-sysfs-'));
    dirs.push(root);
    const devices = join(root, 'devices');
    const net = join(root, 'class', 'net');
    await mkdir(net, { recursive: true });
    const device = async (path: string, name: string, files: Record<string, string>) => {
      const dir = join(devices, path, 'net', name);
      await mkdir(dir, { recursive: true });
      for (const [file, text] of Object.entries(files)) await writeFile(join(dir, file), `${text}\n`);
      await symlink(dir, join(net, name));
    };
    await device('pci0000:00/0000:00:1f.6', 'enp0s31f6', { address: '3c:ec:ef:00:00:01', speed: '25000' });
    await device('virtual', 'br-fast', { address: '02:42:ac:11:00:01', speed: '-1' });
    await device('virtual', 'vethabc', { address: '02:42:ac:11:00:02', speed: '10000' });

    const found = (await networkInterfaceInventory(net)).filter((n) => n.name !== 'lo');
    const byName = new Map(found.map((n) => [n.name, n]));
    expect(byName.get('enp0s31f6')).toMatchObject({
      mac: '3c:ec:ef:00:00:01',
      speedMbps: 25000,
      virtual: false,
    });
    // No link: the speed is unknown, not zero.
    expect(byName.get('br-fast')).toMatchObject({ speedMbps: null, virtual: true });
    expect(byName.has('vethabc')).toBe(false);
  });
});
