import { readFileSync } from 'node:fs';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import {
  inventoryArgs,
  parseCudaVersionFromBanner,
  parseInventoryCsv,
  parseMetricsCsv,
  splitCsvLine,
} from './nvidia-smi.ts';
import { createGpuProvider } from './provider.ts';

const sample = (name: string) => readFileSync(new URL(`./testdata/${name}`, import.meta.url), 'utf8');
const MIB = 1024 * 1024;
const silent = pino({ level: 'silent' });

describe('nvidia-smi CSV parsing', () => {
  it('reads the inventory query', () => {
    expect(parseInventoryCsv(sample('inventory-2xh100.csv'))).toEqual({
      driverVersion: '535.129.03',
      devices: [
        {
          index: 0,
          uuid: 'GPU-4b6c4c1c-0a8c-2b31-7a5f-3e2a4f0d9e11',
          name: 'NVIDIA H100 80GB HBM3',
          memoryTotalBytes: 81559 * MIB,
          pciBusId: '00000000:18:00.0',
        },
        {
          index: 1,
          uuid: 'GPU-9d0e3f27-51b2-8c44-e1a6-0c7d5b2e8f40',
          name: 'NVIDIA H100 80GB HBM3',
          memoryTotalBytes: 81559 * MIB,
          pciBusId: '00000000:2A:00.0',
        },
      ],
    });
  });

  it('reads metrics and processes, with [N/A] and [Not Supported] as null', () => {
    const metrics = parseMetricsCsv(sample('metrics-2xh100.csv'), sample('processes-2xh100.csv'));
    expect(metrics).toEqual([
      {
        index: 0,
        uuid: 'GPU-4b6c4c1c-0a8c-2b31-7a5f-3e2a4f0d9e11',
        utilizationPercent: 87,
        memoryUtilizationPercent: 41,
        memoryUsedBytes: 61254 * MIB,
        memoryTotalBytes: 81559 * MIB,
        temperatureC: 63,
        powerWatts: 612.48,
        smClockMhz: 1980,
        memoryClockMhz: 2619,
        processes: [
          { pid: 23144, usedMemoryBytes: 61240 * MIB },
          { pid: 23310, usedMemoryBytes: null },
        ],
      },
      {
        index: 1,
        uuid: 'GPU-9d0e3f27-51b2-8c44-e1a6-0c7d5b2e8f40',
        utilizationPercent: 0,
        memoryUtilizationPercent: 0,
        memoryUsedBytes: 4 * MIB,
        memoryTotalBytes: 81559 * MIB,
        temperatureC: 31,
        powerWatts: null,
        smClockMhz: 345,
        memoryClockMhz: null,
        processes: [],
      },
    ]);
  });

  it('reads the CUDA version from the banner', () => {
    expect(parseCudaVersionFromBanner(sample('banner.txt'))).toBe('12.2');
    expect(parseCudaVersionFromBanner('no banner')).toBeNull();
  });

  it('ignores blank and short lines, and honours quotes', () => {
    expect(parseInventoryCsv('\n\ngarbage\n').devices).toEqual([]);
    expect(splitCsvLine('0, "a, b", c')).toEqual(['0', 'a, b', 'c']);
  });

  it('is the fallback when NVML cannot load', async () => {
    const calls: string[][] = [];
    const provider = await createGpuProvider({
      simulate: null,
      simulateSeed: 's',
      nvmlLibrary: '/nonexistent/libnvidia-ml.so.1',
      runNvidiaSmi: async (args) => {
        calls.push(args);
        if (args.length === 0) return sample('banner.txt');
        if (args[0]?.startsWith('--query-gpu=index,uuid,name')) return sample('inventory-2xh100.csv');
        if (args[0]?.startsWith('--query-gpu=')) return sample('metrics-2xh100.csv');
        return sample('processes-2xh100.csv');
      },
      logger: silent,
    });
    const inventory = await provider.inventory();
    expect(inventory).toMatchObject({
      source: 'nvidia-smi',
      simulated: false,
      cudaVersion: '12.2',
      error: null,
    });
    expect(inventory.devices).toHaveLength(2);
    expect((await provider.sample())[0]?.utilizationPercent).toBe(87);
    expect(calls).toContainEqual(inventoryArgs());
  });

  it('reports why no source worked when neither NVML nor nvidia-smi does', async () => {
    const provider = await createGpuProvider({
      simulate: null,
      simulateSeed: 's',
      nvmlLibrary: '/nonexistent/libnvidia-ml.so.1',
      runNvidiaSmi: async () => {
        throw new Error('spawn nvidia-smi ENOENT');
      },
      logger: silent,
    });
    const inventory = await provider.inventory();
    expect(inventory).toMatchObject({ source: 'none', simulated: false, devices: [] });
    expect(inventory.error).toMatch(/^nvml: .*; nvidia-smi: spawn nvidia-smi ENOENT$/);
    expect(await provider.sample()).toEqual([]);
  });
});
