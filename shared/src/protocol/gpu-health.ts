import { type Static, Type } from '@sinclair/typebox';
import { EpochMs, Nullable } from './common.ts';

/**
 * GPU health as the agent judges it from NVML, sent with every metrics sample. The control plane keeps
 * the worst state it has seen until an operator resets it, because a GPU that threw XID 79 once may look
 * fine on the next sample and fail the next job.
 */
export const GPU_HEALTH_STATES = ['healthy', 'degraded', 'failed'] as const;
export type GpuHealthState = (typeof GPU_HEALTH_STATES)[number];

export const GpuHealthReason = Type.Object({
  /**
   * Stable machine code: `xid_<n>`, `ecc_uncorrected_volatile`, `ecc_corrected_volatile`,
   * `retired_pages_pending`, `row_remap_pending`, `row_remap_failure`, `throttle_thermal`,
   * `throttle_power_brake`, `throttle_hw_slowdown`, `temperature_near_slowdown`, `pcie_link_downgraded`,
   * `gpu_lost`, `nvml_error`, `nvml_timeout`.
   */
  code: Type.String({ minLength: 1 }),
  severity: Type.Union([Type.Literal('degraded'), Type.Literal('failed')]),
  message: Type.String(),
  /** The NVML call the evidence came from, e.g. `nvmlEventSetWait_v2`, `nvmlDeviceGetTotalEccErrors`. */
  source: Type.String(),
  /** When the agent first saw this reason (kept across samples while it persists). */
  since: EpochMs,
});
export type GpuHealthReason = Static<typeof GpuHealthReason>;

export const GpuEccCounts = Type.Object({
  volatileCorrected: Nullable(Type.Integer({ minimum: 0 })),
  volatileUncorrected: Nullable(Type.Integer({ minimum: 0 })),
  aggregateCorrected: Nullable(Type.Integer({ minimum: 0 })),
  aggregateUncorrected: Nullable(Type.Integer({ minimum: 0 })),
});

export const GpuRowRemap = Type.Object({
  correctable: Type.Integer({ minimum: 0 }),
  uncorrectable: Type.Integer({ minimum: 0 }),
  pending: Type.Boolean(),
  failure: Type.Boolean(),
});

export const GpuPcieLink = Type.Object({
  currentGen: Nullable(Type.Integer({ minimum: 0 })),
  maxGen: Nullable(Type.Integer({ minimum: 0 })),
  currentWidth: Nullable(Type.Integer({ minimum: 0 })),
  maxWidth: Nullable(Type.Integer({ minimum: 0 })),
});

/** Raw evidence plus the verdict; every figure is null where NVML answered NOT_SUPPORTED or failed. */
export const GpuHealth = Type.Object({
  state: Type.Union(GPU_HEALTH_STATES.map((s) => Type.Literal(s))),
  reasons: Type.Array(GpuHealthReason),
  ecc: Nullable(GpuEccCounts),
  /** nvmlDeviceGetRetiredPages_v2 for both causes, plus the pending flag. */
  retiredPages: Nullable(
    Type.Object({
      singleBitEcc: Type.Integer({ minimum: 0 }),
      doubleBitEcc: Type.Integer({ minimum: 0 }),
      pending: Type.Boolean(),
    }),
  ),
  rowRemap: Nullable(GpuRowRemap),
  /** Active clock event reasons by name (`sw_thermal`, `hw_thermal`, `hw_power_brake`, `hw_slowdown`, `sw_power_cap`...). */
  throttleReasons: Nullable(Type.Array(Type.String())),
  /** NVML_TEMPERATURE_THRESHOLD_SLOWDOWN. */
  slowdownTemperatureC: Nullable(Type.Number()),
  pcie: Nullable(GpuPcieLink),
  /** XID events seen since the agent started (critical ones also appear in `reasons`), newest last, at most 32. */
  xids: Type.Array(Type.Object({ xid: Type.Integer({ minimum: 0 }), at: EpochMs })),
});
export type GpuHealth = Static<typeof GpuHealth>;
