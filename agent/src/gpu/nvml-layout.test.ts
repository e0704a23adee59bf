import { readFile } from 'node:fs/promises';
import koffi from 'koffi';
import { beforeAll, describe, expect, it } from 'vitest';
import { createFakeNvml, type FakeNvml } from '../../../test/fixtures/nvml/fake-nvml.ts';
import { nvmlStructTypes } from './nvml.ts';

/**
 * Sizes and field offsets (bytes, x86-64 / aarch64 Linux) of the NVML structs the agent passes through
 * koffi, from NVIDIA's nvml.h with NVML_API_VERSION 13 (CUDA 13.3; NVIDIA/go-nvml gen/nvml/nvml.h at
 * 2f9e261, "sync nvml.h with CUDA version 13.3"). These layouts are unchanged since CUDA 11.0, when
 * nvmlProcessInfo_t (v2) and nvmlEventData_t gained gpuInstanceId/computeInstanceId.
 *   nvmlPciInfo_t: busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE = 16], busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE = 32]
 * bench/gpu-probe-check.sh carries the same table and compiles a C program against a real nvml.h on a
 * GPU server to print these lines, so a drift shows there.
 */
export const NVML_H_LAYOUT = `
nvmlMemory_t=24
nvmlMemory_t.total=0
nvmlMemory_t.free=8
nvmlMemory_t.used=16
nvmlUtilization_t=8
nvmlUtilization_t.gpu=0
nvmlUtilization_t.memory=4
nvmlPciInfo_t=68
nvmlPciInfo_t.busIdLegacy=0
nvmlPciInfo_t.domain=16
nvmlPciInfo_t.bus=20
nvmlPciInfo_t.device=24
nvmlPciInfo_t.pciDeviceId=28
nvmlPciInfo_t.pciSubSystemId=32
nvmlPciInfo_t.busId=36
nvmlProcessInfo_t=24
nvmlProcessInfo_t.pid=0
nvmlProcessInfo_t.usedGpuMemory=8
nvmlProcessInfo_t.gpuInstanceId=16
nvmlProcessInfo_t.computeInstanceId=20
nvmlEventData_t=32
nvmlEventData_t.device=0
nvmlEventData_t.eventType=8
nvmlEventData_t.eventData=16
nvmlEventData_t.gpuInstanceId=24
nvmlEventData_t.computeInstanceId=28
`.trim();

function parse(lines: string): Record<string, number> {
  return Object.fromEntries(
    lines
      .trim()
      .split('\n')
      .map((line) => line.split('='))
      .map(([key, value]) => [key ?? '', Number(value)]),
  );
}

describe('NVML struct layouts', () => {
  let fake: FakeNvml;
  beforeAll(async () => {
    fake = await createFakeNvml({ gpus: [] });
  });

  it('koffi lays out the structs we declare as nvml.h does', () => {
    const measured: string[] = [];
    for (const [name, type] of Object.entries(nvmlStructTypes())) {
      measured.push(`${name}=${koffi.sizeof(type)}`);
      for (const field of Object.keys(parse(NVML_H_LAYOUT)).filter((k) => k.startsWith(`${name}.`))) {
        measured.push(`${field}=${koffi.offsetof(type, field.slice(name.length + 1))}`);
      }
    }
    expect(parse(measured.join('\n'))).toEqual(parse(NVML_H_LAYOUT));
  });

  it('the fake NVML, compiled by gcc, uses the same layouts', () => {
    const lib = koffi.load(fake.libraryPath);
    const layout = lib.func('int fake_nvml_layout(char *out, unsigned int length)');
    const buffer = Buffer.alloc(4096);
    const n = layout(buffer, buffer.length) as number;
    expect(parse(buffer.toString('utf8', 0, n))).toEqual(parse(NVML_H_LAYOUT));
  });

  it('bench/gpu-probe-check.sh compares a real nvml.h with this same table', async () => {
    const script = await readFile(new URL('../../../bench/gpu-probe-check.sh', import.meta.url), 'utf8');
    const table = /# BEGIN NVML_H_LAYOUT\n([\s\S]*?)\n# END NVML_H_LAYOUT/.exec(script)?.[1];
    expect(parse(table ?? '')).toEqual(parse(NVML_H_LAYOUT));
  });
});
