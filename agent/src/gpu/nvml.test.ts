import { setImmediate as turn } from 'node:timers/promises';
import { GpuMetrics } from '@anvil/shared/protocol';
import { Value } from '@sinclair/typebox/value';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import {
  createFakeNvml,
  type FakeGpu,
  type FakeNvml,
  type FakeNvmlConfig,
} from '../../../test/fixtures/nvml/fake-nvml.ts';
import { loadNvml, NvmlError } from './nvml.ts';
import { createGpuProvider, type GpuProvider } from './provider.ts';

const GIB = 1024 ** 3;
/** Each test starts processes (the sampler, through tsx from the sources): room for a loaded machine. */
const SLOW = 180_000;
const silent = pino({ level: 'silent' });

const H100: FakeGpu = {
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
  ecc: { volatileCorrected: 0, volatileUncorrected: 0, aggregateCorrected: 12, aggregateUncorrected: 0 },
  retiredPages: { singleBitEcc: 0, doubleBitEcc: 0, pending: false },
  rowRemap: { correctable: 2, uncorrectable: 0, pending: false, failure: false },
  throttle: 0x4, // sw_power_cap: normal under load
  slowdownTemperature: 87,
  pcie: { gen: 5, maxGen: 5, width: 16, maxWidth: 16 },
  mig: false,
};
// A board without sensors: every unsupported reading must come back null, not zero.
const A10: FakeGpu = { name: 'NVIDIA A10', uuid: 'GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee' };
const BASE: FakeNvmlConfig = { driverVersion: '550.54.15', cudaVersion: 12040, gpus: [H100, A10] };

const providers: GpuProvider[] = [];
async function nvmlProvider(fake: FakeNvml, timings: { timeoutMs?: number; quarantineMs?: number } = {}) {
  const provider = await createGpuProvider({
    simulate: null,
    simulateSeed: 'x',
    nvmlLibrary: fake.libraryPath,
    nvmlSampler: { retryInitialMs: 20, retryMaxMs: 100, ...timings },
    logger: silent,
  });
  providers.push(provider);
  return provider;
}

function reasonsOf(gpu: GpuMetrics | undefined) {
  return gpu?.health?.reasons.map((r) => `${r.severity}:${r.code}:${r.source}`);
}

/** Samples until a sample passes `check` (the sampler's retries and quarantine run on real timers). */
async function untilSample(provider: GpuProvider, check: (sample: GpuMetrics[]) => void): Promise<void> {
  await vi.waitFor(async () => check(await provider.sample()), { timeout: 30_000, interval: 20 });
}

// These tests load a FAKE libnvidia-ml.so.1 compiled from test/fixtures/nvml/fake_nvml.c, so the real
// koffi FFI path (symbol binding, out-pointers, struct layouts, string buffers) runs without a GPU, in the
// sampler process the agent forks for NVML.
describe('NVML through koffi, against the fake library', () => {
  let fake: FakeNvml;

  beforeAll(async () => {
    fake = await createFakeNvml(BASE);
    Object.assign(process.env, fake.env);
  });
  afterEach(async () => {
    await fake.configure(BASE);
  });
  afterAll(() => {
    for (const p of providers) p.close?.();
  });

  it('reads the exact inventory values, MIG mode included', { timeout: SLOW }, async () => {
    await fake.configure({ ...BASE, gpus: [{ ...H100, mig: true }, A10] });
    const provider = await nvmlProvider(fake);
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
          migEnabled: true,
        },
        // No MIG support (NOT_SUPPORTED) is "not MIG-enabled".
        {
          index: 1,
          uuid: 'GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee',
          name: 'NVIDIA A10',
          memoryTotalBytes: null,
          pciBusId: null,
          migEnabled: false,
        },
      ],
      error: null,
    });
  });

  it('reads the exact metric and health values, null where the board does not support a reading', {
    timeout: SLOW,
  }, async () => {
    const provider = await nvmlProvider(fake);
    await provider.inventory();
    const [h100, a10] = await provider.sample();
    expect(h100).toEqual({
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
      health: {
        state: 'healthy',
        reasons: [],
        ecc: {
          volatileCorrected: 0,
          volatileUncorrected: 0,
          aggregateCorrected: 12,
          aggregateUncorrected: 0,
        },
        retiredPages: { singleBitEcc: 0, doubleBitEcc: 0, pending: false },
        rowRemap: { correctable: 2, uncorrectable: 0, pending: false, failure: false },
        throttleReasons: ['sw_power_cap'],
        slowdownTemperatureC: 87,
        pcie: { currentGen: 5, maxGen: 5, currentWidth: 16, maxWidth: 16 },
        xids: [],
      },
    });
    expect(a10).toEqual({
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
      health: {
        state: 'healthy',
        reasons: [],
        ecc: null,
        retiredPages: null,
        rowRemap: null,
        throttleReasons: null,
        slowdownTemperatureC: null,
        pcie: null,
        xids: [],
      },
    });
    expect(Value.Check(GpuMetrics, h100)).toBe(true);
  });

  it('judges XID events, ECC, row remapping, retired pages, throttling, temperature and PCIe from NVML', {
    timeout: SLOW,
  }, async () => {
    const provider = await nvmlProvider(fake);
    await provider.inventory();
    expect((await provider.sample())[0]?.health?.state).toBe('healthy');
    await fake.configure({
      ...BASE,
      gpus: [
        {
          ...H100,
          xids: [13, 79],
          ecc: {
            volatileCorrected: 5,
            volatileUncorrected: 1,
            aggregateCorrected: 17,
            aggregateUncorrected: 1,
          },
          retiredPages: { singleBitEcc: 1, doubleBitEcc: 2, pending: true },
          rowRemap: { correctable: 2, uncorrectable: 1, pending: true, failure: true },
          throttle: 0x40 | 0x80 | 0x8,
          temperature: 84,
          pcie: { gen: 5, maxGen: 5, width: 8, maxWidth: 16 },
        },
        { ...A10, xids: [94] },
      ],
    });
    const [h100, a10] = await provider.sample();
    expect(h100?.health?.state).toBe('failed');
    expect(reasonsOf(h100)).toEqual([
      'failed:xid_79:nvmlEventSetWait_v2',
      'failed:ecc_uncorrected_volatile:nvmlDeviceGetTotalEccErrors',
      'failed:row_remap_failure:nvmlDeviceGetRemappedRows',
      'degraded:row_remap_pending:nvmlDeviceGetRemappedRows',
      'degraded:retired_pages_pending:nvmlDeviceGetRetiredPagesPendingStatus',
      'degraded:throttle_thermal:nvmlDeviceGetCurrentClocksEventReasons',
      'degraded:throttle_power_brake:nvmlDeviceGetCurrentClocksEventReasons',
      'degraded:temperature_near_slowdown:nvmlDeviceGetTemperatureThreshold',
      'degraded:pcie_link_downgraded:nvmlDeviceGetCurrPcieLinkWidth',
    ]);
    expect(h100?.health?.xids.map((x) => x.xid)).toEqual([13, 79]);
    expect(h100?.health?.retiredPages).toEqual({ singleBitEcc: 1, doubleBitEcc: 2, pending: true });
    expect(h100?.health?.throttleReasons).toEqual(['hw_slowdown', 'hw_thermal', 'hw_power_brake']);
    expect(a10?.health?.state).toBe('degraded');
    expect(reasonsOf(a10)).toEqual(['degraded:xid_94:nvmlEventSetWait_v2']);
    // Each XID is delivered once; the XID verdict stays while the other conditions clear.
    await fake.configure({ ...BASE, gpus: [{ ...H100, xids: [13, 79] }, A10] });
    const [later] = await provider.sample();
    expect(reasonsOf(later)).toEqual(['failed:xid_79:nvmlEventSetWait_v2']);
    expect(later?.health?.xids.map((x) => x.xid)).toEqual([13, 79]);
  });

  it('a lost GPU fails alone; the others keep their figures', { timeout: SLOW }, async () => {
    const provider = await nvmlProvider(fake);
    await provider.inventory();
    await fake.configure({ ...BASE, gpus: [{ ...H100, lost: true }, A10] });
    const [lost, a10] = await provider.sample();
    expect(lost).toMatchObject({
      index: 0,
      uuid: H100.uuid,
      utilizationPercent: null,
      powerWatts: null,
      health: { state: 'failed' },
    });
    expect(reasonsOf(lost)).toEqual(['failed:gpu_lost:nvmlDeviceGetUUID']);
    expect(a10?.health?.state).toBe('healthy');
    // The inventory keeps the lost GPU under the UUID it had.
    expect((await provider.inventory()).devices.map((d) => d.uuid)).toEqual([H100.uuid, A10.uuid]);
  });

  it('a hung NVML call never blocks the event loop: that GPU reports nvml_timeout, the others their figures', {
    timeout: SLOW,
  }, async () => {
    const provider = await nvmlProvider(fake, { timeoutMs: 3000, quarantineMs: 300 });
    await provider.inventory();
    await fake.configure({
      ...BASE,
      gpus: [
        { ...H100, hang: 'nvmlDeviceGetPowerUsage' },
        { ...A10, temperature: 55 },
      ],
    });
    const sampling = provider.sample();
    // The event loop keeps turning while NVML hangs (heartbeats are timers on it): a turn comes first.
    const first = await Promise.race([sampling.then(() => 'sample'), turn().then(() => 'turn')]);
    expect(first).toBe('turn');
    const [hung, a10] = await sampling;
    expect(hung).toMatchObject({ uuid: H100.uuid, utilizationPercent: null, health: { state: 'degraded' } });
    expect(reasonsOf(hung)).toEqual(['degraded:nvml_timeout:nvml']);
    expect(a10).toMatchObject({ uuid: A10.uuid, temperatureC: 55, health: { state: 'healthy' } });
    // The GPU is set aside: the next sample does not wait on it again.
    const since = hung?.health?.reasons[0]?.since;
    const [still, other] = await provider.sample();
    expect(still?.health?.reasons).toMatchObject([{ code: 'nvml_timeout', since }]);
    expect(other?.temperatureC).toBe(55);
    // Once its time aside is over, the GPU is read again; it answers now.
    await fake.configure(BASE);
    await untilSample(provider, (back) =>
      expect(back[0]).toMatchObject({ powerWatts: 612.48, health: { state: 'healthy', reasons: [] } }),
    );
  });

  it('a hung device count leaves every GPU unknown (nvml_timeout), and the next process reads them again', {
    timeout: SLOW,
  }, async () => {
    const provider = await nvmlProvider(fake, { timeoutMs: 3000 });
    await provider.inventory();
    await fake.configure({ ...BASE, hang: 'nvmlDeviceGetCount_v2' });
    const hung = await provider.sample();
    expect(hung.map((g) => [g.uuid, g.powerWatts, reasonsOf(g)])).toEqual([
      [H100.uuid, null, ['degraded:nvml_timeout:nvml']],
      [A10.uuid, null, ['degraded:nvml_timeout:nvml']],
    ]);
    await fake.configure(BASE);
    await untilSample(provider, (back) =>
      expect(back[0]).toMatchObject({ powerWatts: 612.48, health: { state: 'healthy', reasons: [] } }),
    );
  });

  it('re-initialises NVML after the driver goes away and comes back', { timeout: SLOW }, async () => {
    const provider = await nvmlProvider(fake);
    await provider.inventory();
    await fake.configure({ ...BASE, initError: 9 });
    const gone = await provider.sample();
    expect(gone.map((g) => [g.uuid, g.powerWatts, g.health?.state])).toEqual([
      [H100.uuid, null, 'degraded'],
      [A10.uuid, null, 'degraded'],
    ]);
    expect(reasonsOf(gone[0])).toEqual(['degraded:nvml_error:nvmlDeviceGetCount_v2']);
    // While the driver stays away every start fails (backoff); once back, figures return.
    await untilSample(provider, (back) =>
      expect(reasonsOf(back[0])).toEqual(['degraded:nvml_error:nvmlInit_v2']),
    );
    await fake.configure(BASE);
    await untilSample(provider, (back) =>
      expect(back[0]).toMatchObject({ powerWatts: 612.48, health: { state: 'healthy', reasons: [] } }),
    );
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

  it('falls back when nvmlInit fails (driver not loaded)', { timeout: SLOW }, async () => {
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
        logger: silent,
      });
      const inventory = await provider.inventory();
      expect(inventory.source).toBe('none');
      expect(inventory.error).toContain('nvmlInit_v2: Driver Not Loaded (nvml 9)');
    } finally {
      process.env['FAKE_NVML_CONFIG'] = saved;
    }
  });
});
