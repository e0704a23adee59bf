/**
 * `npm run agent -- --probe` (or `node agent/dist/main.js --probe`): what the agent would send about this
 * server's GPUs, without a control plane: the GPU inventory, one metrics/health sample, and whether both
 * pass the protocol's schemas. bench/gpu-probe-check.sh compares it with nvidia-smi and pynvml.
 */
import { GpuInventory, GpuMetrics } from '@anvil/shared/protocol';
import { Type } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { AGENT_VERSION } from '../version.ts';
import type { GpuProvider } from './provider.ts';

export interface ProbeReport {
  agentVersion: string;
  probedAt: string;
  gpu: { inventory: GpuInventory; sample: GpuMetrics[] };
  /** How long the sample took (NVML calls in the sampler process, watchdog included). */
  sampleMs: number;
  /** Schema errors of the inventory and sample against the agent protocol; empty when both are valid. */
  protocolErrors: string[];
}

const GpuSample = Type.Array(GpuMetrics);

export async function probeGpus(options: {
  createProvider: () => Promise<GpuProvider>;
  now?: () => number;
}): Promise<ProbeReport> {
  const now = options.now ?? Date.now;
  const provider = await options.createProvider();
  try {
    const inventory = await provider.inventory();
    const started = now();
    const sample = await provider.sample();
    const sampleMs = now() - started;
    const protocolErrors = [
      ...[...Value.Errors(GpuInventory, inventory)].map((e) => `inventory${e.path}: ${e.message}`),
      ...[...Value.Errors(GpuSample, sample)].map((e) => `sample${e.path}: ${e.message}`),
    ];
    return {
      agentVersion: AGENT_VERSION,
      probedAt: new Date(started).toISOString(),
      gpu: { inventory, sample },
      sampleMs,
      protocolErrors,
    };
  } finally {
    provider.close?.();
  }
}
