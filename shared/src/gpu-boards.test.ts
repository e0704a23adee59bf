import { describe, expect, it } from 'vitest';
import { GPU_BOARDS, GPU_TYPES, gpuBoardOf } from './gpu-boards.ts';

/** NVML product names as drivers report them (nvmlDeviceGetName / nvidia-smi --query-gpu=name). */
const NVML_NAMES: readonly [string, string | null, string | null][] = [
  ['NVIDIA H200', 'H200', 'H200'],
  ['NVIDIA H200 NVL', 'H200', 'H200'],
  ['NVIDIA H100 80GB HBM3', 'H100', 'H100 SXM'],
  ['NVIDIA H100 SXM5 80GB', 'H100', 'H100 SXM'],
  ['NVIDIA H100', 'H100', 'H100 SXM'],
  ['NVIDIA H100 PCIe', 'H100_PCIE', 'H100 PCIe'],
  ['NVIDIA H100 NVL', 'H100_PCIE', 'H100 PCIe'],
  ['NVIDIA A100-SXM4-80GB', 'A100', 'A100 80GB'],
  ['NVIDIA A100 80GB PCIe', 'A100', 'A100 80GB'],
  ['NVIDIA A100-SXM4-40GB', 'A100_40GB', 'A100 40GB'],
  ['NVIDIA A100-PCIE-40GB', 'A100_40GB', 'A100 40GB'],
  ['NVIDIA L40S', 'L40S', 'L40S'],
  ['NVIDIA A10', 'A10', 'A10'],
  ['NVIDIA A10G', 'A10', 'A10'],
  ['NVIDIA GeForce RTX 4090', 'RTX4090', 'RTX 4090'],
  ['Tesla V100-SXM2-16GB', 'V100', 'V100'],
  ['Tesla V100-PCIE-32GB', 'V100', 'V100'],
  ['Tesla T4', 'T4', 'T4'],
  // Boards no customer can ask for, and near misses of the patterns above.
  ['NVIDIA L40', null, null],
  ['NVIDIA A16', null, null],
  ['NVIDIA A30', null, null],
  ['NVIDIA A40', null, null],
  ['NVIDIA RTX A6000', null, null],
  ['NVIDIA T400', null, null],
  ['NVIDIA GeForce RTX 3090', null, null],
];

describe('GPU board catalogue', () => {
  it.each(NVML_NAMES)('%s → %s (%s)', (name, type, board) => {
    const found = gpuBoardOf(name);
    expect(found?.type ?? null).toBe(type);
    expect(found?.board ?? null).toBe(board);
  });

  it('matches case-insensitively, as NVML spelling varies between drivers', () => {
    expect(gpuBoardOf('nvidia h100 pcie')?.type).toBe('H100_PCIE');
  });

  it('every schedulable type has a board and every board a schedulable type', () => {
    expect(new Set(GPU_BOARDS.map((b) => b.type))).toEqual(new Set(GPU_TYPES));
  });
});
