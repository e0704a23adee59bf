import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { createGpuProvider } from './provider.ts';
import { parseSimulateGpus, simulatedDevices } from './simulate.ts';

describe('--simulate-gpus', () => {
  it('parses counts and models', () => {
    expect(parseSimulateGpus('2xH100')).toEqual([{ count: 2, model: 'H100' }]);
    expect(parseSimulateGpus('1xh100, 2xA100')).toEqual([
      { count: 1, model: 'H100' },
      { count: 2, model: 'A100' },
    ]);
  });

  it.each(['', 'H100', '0xH100', '2xV999', '2x H100', '2xH100;rm -rf /'])('rejects %j', (value) => {
    expect(() => parseSimulateGpus(value)).toThrow(/expected <count>x<model>/);
  });

  it('gives stable, host-specific UUIDs and no invented PCI address', () => {
    const a = simulatedDevices(parseSimulateGpus('2xH100'), 'host-a');
    expect(a.map((d) => d.index)).toEqual([0, 1]);
    expect(a[0]?.uuid).toMatch(/^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    expect(a[0]?.uuid).not.toBe(a[1]?.uuid);
    expect(simulatedDevices(parseSimulateGpus('2xH100'), 'host-a')).toEqual(a);
    expect(simulatedDevices(parseSimulateGpus('2xH100'), 'host-b')[0]?.uuid).not.toBe(a[0]?.uuid);
    expect(a[0]).toMatchObject({
      name: 'NVIDIA H100 80GB HBM3',
      memoryTotalBytes: 81559 * 1024 * 1024,
      pciBusId: null,
    });
  });

  it('marks the inventory simulated, warns loudly, and never invents readings', async () => {
    const lines: { level: number; msg: string }[] = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => lines.push(JSON.parse(line)) });
    const provider = await createGpuProvider({ simulate: '2xH100', simulateSeed: 'seed', logger });
    const inventory = await provider.inventory();
    expect(inventory).toMatchObject({
      simulated: true,
      source: 'simulated',
      driverVersion: null,
      cudaVersion: null,
    });
    expect(inventory.devices).toHaveLength(2);
    expect(lines).toContainEqual(
      expect.objectContaining({ level: 40, msg: expect.stringContaining('SIMULATED') }),
    );
    const [sample] = await provider.sample();
    expect(sample).toMatchObject({
      utilizationPercent: null,
      temperatureC: null,
      powerWatts: null,
      processes: [],
    });
  });
});
