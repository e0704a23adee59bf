import { execFile } from 'node:child_process';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createFakeNvml, type FakeNvml } from '../../../test/fixtures/nvml/fake-nvml.ts';
import { buildAgent } from '../../scripts/build.ts';
import type { ProbeReport } from './probe.ts';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const GIB = 1024 ** 3;
/** Each test starts processes (the sampler, through tsx from the sources): room for a loaded machine. */
const SLOW = 180_000;

// `--probe` as an operator runs it: a separate process, from the sources (tsx) and from the bundle, against
// the FAKE libnvidia-ml.so.1 (test/fixtures/nvml/fake_nvml.c), with no control plane anywhere.
describe('agent --probe', () => {
  let fake: FakeNvml;
  // Inside agent/ so the bundle finds node_modules the way agent/dist/main.js does.
  const bundleDir = join(ROOT, 'agent', `dist-probe-test-${process.pid}`);

  beforeAll(async () => {
    fake = await createFakeNvml({
      driverVersion: '550.54.15',
      cudaVersion: 12040,
      gpus: [
        {
          name: 'NVIDIA H200',
          uuid: 'GPU-22222222-3333-4444-5555-666666666666',
          pciBusId: '00000000:1B:00.0',
          memoryTotal: 141 * GIB,
          memoryUsed: GIB,
          memoryFree: 140 * GIB,
          utilGpu: 99,
          utilMemory: 70,
          temperature: 71,
          powerMw: 690_000,
          clockSm: 1980,
          clockMem: 3201,
          ecc: {
            volatileCorrected: 0,
            volatileUncorrected: 0,
            aggregateCorrected: 0,
            aggregateUncorrected: 0,
          },
          rowRemap: { correctable: 0, uncorrectable: 0, pending: false, failure: false },
          throttle: 0x4,
          slowdownTemperature: 90,
          pcie: { gen: 5, maxGen: 5, width: 16, maxWidth: 16 },
          mig: false,
          xids: [79],
        },
      ],
    });
  });
  afterAll(async () => {
    await rm(bundleDir, { recursive: true, force: true });
  });

  async function probe(command: string[]): Promise<ProbeReport> {
    const { stdout } = await run(
      process.execPath,
      [...command, '--probe', '--nvml-library', fake.libraryPath],
      { cwd: ROOT, env: { ...process.env, ...fake.env, ANVIL_CONTROL_PLANE: '' }, timeout: 120_000 },
    );
    return JSON.parse(stdout) as ProbeReport;
  }

  function expectReport(report: ProbeReport) {
    expect(report.protocolErrors).toEqual([]);
    expect(report.gpu.inventory).toEqual({
      simulated: false,
      source: 'nvml',
      driverVersion: '550.54.15',
      cudaVersion: '12.4',
      devices: [
        {
          index: 0,
          uuid: 'GPU-22222222-3333-4444-5555-666666666666',
          name: 'NVIDIA H200',
          memoryTotalBytes: 141 * GIB,
          pciBusId: '00000000:1B:00.0',
          migEnabled: false,
        },
      ],
      error: null,
    });
    expect(report.gpu.sample).toMatchObject([
      {
        index: 0,
        uuid: 'GPU-22222222-3333-4444-5555-666666666666',
        utilizationPercent: 99,
        memoryUsedBytes: GIB,
        powerWatts: 690,
        temperatureC: 71,
        health: {
          state: 'failed',
          reasons: [{ code: 'xid_79', severity: 'failed', source: 'nvmlEventSetWait_v2' }],
          throttleReasons: ['sw_power_cap'],
          slowdownTemperatureC: 90,
          xids: [{ xid: 79 }],
        },
      },
    ]);
  }

  it('prints the inventory and one health sample from the sources', { timeout: SLOW }, async () => {
    expectReport(await probe(['--import', 'tsx', 'agent/src/main.ts']));
  });

  it('prints the same from the bundle, whose NVML sampler process is bundled beside it', {
    timeout: SLOW,
  }, async () => {
    const main = await buildAgent(join(bundleDir, 'main.js'));
    expectReport(await probe([main]));
  });
});
