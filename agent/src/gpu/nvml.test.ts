import { pino } from 'pino';
import { beforeAll, describe, expect, it } from 'vitest';
import { createFakeNvml, type FakeNvml } from '../../../test/fixtures/nvml/fake-nvml.ts';
import { loadNvml, NvmlError } from './nvml.ts';
import { createGpuProvider } from './provider.ts';

const GIB = 1024 ** 3;

// These tests load a FAKE libnvidia-ml.so.1 compiled from test/fixtures/nvml/fake_nvml.c, so the real
// koffi FFI path (symbol binding, out-pointers, struct layouts, string buffers) runs without a GPU.
describe('NVML through koffi, against the fake library', () => {
  let fake: FakeNvml;

  beforeAll(async () => {
    fake = await createFakeNvml({
      driverVersion: '550.54.15',
      cudaVersion: 12040,
      gpus: [
        {
          name: 'NVIDIA H100 80GB HBM3',
          uuid: 'GPU-11111111-2222-3333-4444-555555555555',
          pciBusId: '00000000:18:00.0',
          memoryTotal: 80 * GIB,
          memoryUsed: 20 * GIB,
          memoryFree: 60 * GIB,
          utilGpu: 87,
          utilMemory: 41,
          temperature: 63,
          powerMw: 612_480,
          clockSm: 1980,
          clockMem: 2619,
          processes: [
            { pid: 4242, usedBytes: 19 * GIB },
            { pid: 4343, usedBytes: GIB },
          ],
        },
        // A board without sensors: every unsupported reading must come back null, not zero.
        { name: 'NVIDIA A10', uuid: 'GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee' },
      ],
    });
    Object.assign(process.env, fake.env);
  });

  it('reads the exact inventory values', async () => {
    const provider = await createGpuProvider({
      simulate: null,
      simulateSeed: 'x',
      nvmlLibrary: fake.libraryPath,
      logger: pino({ level: 'silent' }),
    });
    expect(await provider.inventory()).toEqual({
      simulated: false,
      source: 'nvml',
      driverVersion: '550.54.15',
      cudaVersion: '12.4',
      devices: [
        {
          index: 0,
          uuid: 'GPU-11111111-2222-3333-4444-555555555555',
          name: 'NVIDIA H100 80GB HBM3',
          memoryTotalBytes: 80 * GIB,
          pciBusId: '00000000:18:00.0',
        },
        {
          index: 1,
          uuid: 'GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee',
          name: 'NVIDIA A10',
          memoryTotalBytes: null,
          pciBusId: null,
        },
      ],
      error: null,
    });
  });

  it('reads the exact metric values, null where the board does not support a reading', async () => {
    const provider = await createGpuProvider({
      simulate: null,
      simulateSeed: 'x',
      nvmlLibrary: fake.libraryPath,
      logger: pino({ level: 'silent' }),
    });
    expect(await provider.sample()).toEqual([
      {
        index: 0,
        uuid: 'GPU-11111111-2222-3333-4444-555555555555',
        utilizationPercent: 87,
        memoryUtilizationPercent: 41,
        memoryUsedBytes: 20 * GIB,
        memoryTotalBytes: 80 * GIB,
        temperatureC: 63,
        powerWatts: 612.48,
        smClockMhz: 1980,
        memoryClockMhz: 2619,
        processes: [
          { pid: 4242, usedMemoryBytes: 19 * GIB },
          { pid: 4343, usedMemoryBytes: GIB },
        ],
      },
      {
        index: 1,
        uuid: 'GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee',
        utilizationPercent: null,
        memoryUtilizationPercent: null,
        memoryUsedBytes: null,
        memoryTotalBytes: null,
        temperatureC: null,
        powerWatts: null,
        smClockMhz: null,
        memoryClockMhz: null,
        processes: [],
      },
    ]);
  });

  it('turns NVML error codes into errors with NVML’s own words', () => {
    const nvml = loadNvml(fake.libraryPath);
    nvml.init();
    const a10 = nvml.deviceByIndex(1);
    expect(() => nvml.temperature(a10)).toThrow(
      new NvmlError('nvmlDeviceGetTemperature', 3, 'Not Supported'),
    );
    expect(() => nvml.deviceByIndex(7)).toThrow(/nvmlDeviceGetHandleByIndex_v2: Invalid Argument \(nvml 2\)/);
  });

  it('falls back when nvmlInit fails (driver not loaded)', async () => {
    const broken = await createFakeNvml({ initError: 9, gpus: [] });
    const saved = process.env['FAKE_NVML_CONFIG'];
    process.env['FAKE_NVML_CONFIG'] = broken.env['FAKE_NVML_CONFIG'];
    try {
      const provider = await createGpuProvider({
        simulate: null,
        simulateSeed: 'x',
        nvmlLibrary: broken.libraryPath,
        runNvidiaSmi: async () => {
          throw new Error('not installed');
        },
        logger: pino({ level: 'silent' }),
      });
      const inventory = await provider.inventory();
      expect(inventory.source).toBe('none');
      expect(inventory.error).toContain('nvmlInit_v2: Driver Not Loaded (nvml 9)');
    } finally {
      process.env['FAKE_NVML_CONFIG'] = saved;
    }
  });
});
