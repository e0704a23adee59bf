import type { GpuHealth } from '@anvil/shared/protocol';

/**
 * The numbers of a GPU's health evidence, as stored with each GPU sample (metric_samples.data) and
 * exported as DCGM-named gauges (prometheus.ts). Null where NVML gave no figure; none at all without health.
 */
export function gpuHealthFigures(health: GpuHealth | undefined): Record<string, number | null> {
  if (!health) return {};
  const flag = (value: boolean | undefined) => (value === undefined ? null : value ? 1 : 0);
  return {
    // DCGM's XID_ERRORS: the last XID seen, 0 when none (the agent keeps the XIDs since it started).
    xidLast: health.xids.length > 0 ? health.xids[health.xids.length - 1]!.xid : 0,
    xidCount: health.xids.length,
    eccSbeVolatile: health.ecc?.volatileCorrected ?? null,
    eccDbeVolatile: health.ecc?.volatileUncorrected ?? null,
    eccSbeAggregate: health.ecc?.aggregateCorrected ?? null,
    eccDbeAggregate: health.ecc?.aggregateUncorrected ?? null,
    retiredPagesSbe: health.retiredPages?.singleBitEcc ?? null,
    retiredPagesDbe: health.retiredPages?.doubleBitEcc ?? null,
    retiredPagesPending: flag(health.retiredPages?.pending),
    rowRemapCorrectable: health.rowRemap?.correctable ?? null,
    rowRemapUncorrectable: health.rowRemap?.uncorrectable ?? null,
    rowRemapFailure: flag(health.rowRemap?.failure),
    pcieLinkGen: health.pcie?.currentGen ?? null,
    pcieLinkWidth: health.pcie?.currentWidth ?? null,
    slowdownTemperatureC: health.slowdownTemperatureC,
  };
}
