/**
 * GPU health: turns what NVML reported about one GPU into a verdict (`healthy`, `degraded`, `failed`)
 * with its reasons. Pure: no NVML here, so every rule is unit-tested with plain objects
 * (health.test.ts); the evidence comes from nvml-child.ts.
 *
 * Rules (each reason names the NVML call its evidence came from):
 *   failed    gpu_lost                  a call answered NVML_ERROR_GPU_IS_LOST (the GPU fell off the bus)
 *   failed    xid_<n>                   a critical XID in FAILED_XIDS (below)
 *   degraded  xid_<n>                   a critical XID in DEGRADED_XIDS; other XIDs (13, 31, 43, 45...:
 *                                       faults of one application) are listed in `xids` but judge nothing
 *   failed    ecc_uncorrected_volatile  uncorrected ECC errors since the last driver load
 *   degraded  ecc_corrected_volatile    >= ECC_CORRECTED_DEGRADED corrected ECC errors since the driver load
 *                                       (aggregate counts are the board's lifetime history: shown, not judged)
 *   failed    row_remap_failure         the row remapper ran out of spare rows (the board needs an RMA)
 *   degraded  row_remap_pending         a remap waits for a GPU reset
 *   degraded  retired_pages_pending     a page retirement waits for a GPU reset (pre-Ampere boards)
 *   degraded  throttle_thermal          clocks held down by sw_thermal or hw_thermal
 *   degraded  throttle_power_brake      hw_power_brake (external power brake asserted)
 *   degraded  throttle_hw_slowdown      hw_slowdown without a thermal or power-brake cause
 *                                       (sw_power_cap, idle, application clocks, sync boost: normal, not judged)
 *   degraded  temperature_near_slowdown GPU temperature within NEAR_SLOWDOWN_C of the slowdown threshold
 *   degraded  pcie_link_downgraded      link width below the maximum; or generation below the maximum while
 *                                       the GPU is busy (>= PCIE_BUSY_PERCENT): idle GPUs lower the
 *                                       generation to save power, which is normal
 *   degraded  nvml_error                another NVML error than NOT_SUPPORTED / NO_PERMISSION on this GPU
 *   degraded  nvml_timeout              an NVML call on this GPU did not return within the watchdog's time
 *                                       (the GPU is skipped for a while; the sampler process was replaced)
 * XID reasons stay until the agent restarts (the control plane keeps the worst state until an operator
 * resets it); the others last while their condition does.
 */
import type { GpuHealth, GpuHealthReason } from '@anvil/shared/protocol';

/**
 * XIDs that mean the GPU cannot be trusted with a new job until it is reset or replaced (NVIDIA's XID
 * catalogue, "Xid Errors" in the GPU deployment guide): 48 double-bit ECC, 62 internal micro-controller
 * halt, 64 ECC page retirement / row remap recording failure, 74 NVLink error, 79 fallen off the bus,
 * 95 uncontained ECC error, 119/120 GSP RPC timeout / GSP error, 140 unrecovered ECC error, 154 recovery
 * action changed (reset or reboot required).
 */
export const FAILED_XIDS: ReadonlySet<number> = new Set([48, 62, 64, 74, 79, 95, 119, 120, 140, 154]);
/**
 * XIDs after which the GPU still works but needs attention: 61 internal micro-controller breakpoint,
 * 63 ECC page retirement / row remap recorded (applies at the next reset), 92 high single-bit ECC rate,
 * 94 contained ECC error (only the application that hit it is affected).
 */
export const DEGRADED_XIDS: ReadonlySet<number> = new Set([61, 63, 92, 94]);

export const ECC_CORRECTED_DEGRADED = 1000;
export const NEAR_SLOWDOWN_C = 5;
export const PCIE_BUSY_PERCENT = 50;
const MAX_XIDS = 32;

/** nvmlClocksEventReason* bits (nvml.h), by the names the protocol uses. */
export const CLOCK_EVENT_REASONS: readonly [number, string][] = [
  [0x1, 'gpu_idle'],
  [0x2, 'applications_clocks_setting'],
  [0x4, 'sw_power_cap'],
  [0x8, 'hw_slowdown'],
  [0x10, 'sync_boost'],
  [0x20, 'sw_thermal'],
  [0x40, 'hw_thermal'],
  [0x80, 'hw_power_brake'],
  [0x100, 'display_clock_setting'],
];

export function clockEventReasonNames(mask: number): string[] {
  return CLOCK_EVENT_REASONS.filter(([bit]) => (mask & bit) !== 0).map(([, name]) => name);
}

/** An NVML error on one call for this GPU (NOT_SUPPORTED is not one: the figure is just null). */
export interface NvmlCallError {
  fn: string;
  code: number;
  message: string;
}

/** What NVML said about one GPU in one sample; null where the board does not support the reading. */
export interface GpuEvidence {
  ecc: {
    volatileCorrected: number | null;
    volatileUncorrected: number | null;
    aggregateCorrected: number | null;
    aggregateUncorrected: number | null;
  } | null;
  retiredPages: { singleBitEcc: number; doubleBitEcc: number; pending: boolean } | null;
  rowRemap: { correctable: number; uncorrectable: number; pending: boolean; failure: boolean } | null;
  clockEvents: { mask: number; source: string } | null;
  slowdownTemperatureC: number | null;
  temperatureC: number | null;
  utilizationPercent: number | null;
  pcie: {
    currentGen: number | null;
    maxGen: number | null;
    currentWidth: number | null;
    maxWidth: number | null;
  } | null;
  /** XIDs drained from the GPU's event set in this sample, oldest first. */
  xids: number[];
  /** The call that answered NVML_ERROR_GPU_IS_LOST, if any did. */
  lostAt: string | null;
  errors: NvmlCallError[];
  /** Set by the watchdog instead of the rest when the GPU's calls hung. */
  timedOut?: { fn: string | null; ms: number };
}

export type Finding = Omit<GpuHealthReason, 'since'>;

function xidFinding(xid: number): Finding | null {
  const severity = FAILED_XIDS.has(xid) ? 'failed' : DEGRADED_XIDS.has(xid) ? 'degraded' : null;
  if (!severity) return null;
  return {
    code: `xid_${xid}`,
    severity,
    message: `critical XID ${xid} reported by the driver`,
    source: 'nvmlEventSetWait_v2',
  };
}

/** The rules above, on one sample's evidence. XIDs are judged by the tracker (they are events). */
export function judgeEvidence(e: GpuEvidence): Finding[] {
  const found: Finding[] = [];
  const add = (code: string, severity: Finding['severity'], message: string, source: string) =>
    found.push({ code, severity, message, source });
  if (e.timedOut) {
    add(
      'nvml_timeout',
      'degraded',
      `NVML did not answer within ${e.timedOut.ms} ms${e.timedOut.fn ? ` (${e.timedOut.fn})` : ''}`,
      e.timedOut.fn ?? 'nvml',
    );
    return found;
  }
  if (e.lostAt) add('gpu_lost', 'failed', 'NVML reports the GPU is lost (fallen off the bus)', e.lostAt);
  const ecc = 'nvmlDeviceGetTotalEccErrors';
  if ((e.ecc?.volatileUncorrected ?? 0) > 0)
    add('ecc_uncorrected_volatile', 'failed', `${e.ecc?.volatileUncorrected} uncorrected ECC errors`, ecc);
  if ((e.ecc?.volatileCorrected ?? 0) >= ECC_CORRECTED_DEGRADED)
    add('ecc_corrected_volatile', 'degraded', `${e.ecc?.volatileCorrected} corrected ECC errors`, ecc);
  if (e.rowRemap?.failure)
    add('row_remap_failure', 'failed', 'row remapping failed: no spare rows', 'nvmlDeviceGetRemappedRows');
  if (e.rowRemap?.pending)
    add('row_remap_pending', 'degraded', 'a row remap waits for a GPU reset', 'nvmlDeviceGetRemappedRows');
  if (e.retiredPages?.pending)
    add(
      'retired_pages_pending',
      'degraded',
      'a page retirement waits for a GPU reset',
      'nvmlDeviceGetRetiredPagesPendingStatus',
    );
  if (e.clockEvents) {
    const names = clockEventReasonNames(e.clockEvents.mask);
    const src = e.clockEvents.source;
    const thermal = names.filter((n) => n === 'sw_thermal' || n === 'hw_thermal');
    if (thermal.length > 0)
      add('throttle_thermal', 'degraded', `clocks throttled: ${thermal.join(', ')}`, src);
    if (names.includes('hw_power_brake'))
      add('throttle_power_brake', 'degraded', 'clocks throttled: external power brake', src);
    if (names.includes('hw_slowdown') && !names.includes('hw_thermal') && !names.includes('hw_power_brake'))
      add('throttle_hw_slowdown', 'degraded', 'clocks throttled: hardware slowdown', src);
  }
  if (
    e.temperatureC !== null &&
    e.slowdownTemperatureC !== null &&
    e.temperatureC >= e.slowdownTemperatureC - NEAR_SLOWDOWN_C
  )
    add(
      'temperature_near_slowdown',
      'degraded',
      `${e.temperatureC} °C, slowdown at ${e.slowdownTemperatureC} °C`,
      'nvmlDeviceGetTemperatureThreshold',
    );
  const p = e.pcie;
  if (p) {
    const narrow = p.currentWidth !== null && p.maxWidth !== null && p.currentWidth < p.maxWidth;
    const busy = (e.utilizationPercent ?? 0) >= PCIE_BUSY_PERCENT;
    const slow = busy && p.currentGen !== null && p.maxGen !== null && p.currentGen < p.maxGen;
    if (narrow || slow)
      add(
        'pcie_link_downgraded',
        'degraded',
        `PCIe link gen ${p.currentGen}/${p.maxGen}, width x${p.currentWidth}/x${p.maxWidth}`,
        narrow ? 'nvmlDeviceGetCurrPcieLinkWidth' : 'nvmlDeviceGetCurrPcieLinkGeneration',
      );
  }
  for (const err of e.errors) add('nvml_error', 'degraded', err.message, err.fn);
  return found;
}

function worst(reasons: { severity: Finding['severity'] }[]): GpuHealth['state'] {
  if (reasons.some((r) => r.severity === 'failed')) return 'failed';
  return reasons.length > 0 ? 'degraded' : 'healthy';
}

/**
 * Keeps, per GPU (by UUID), what outlives one sample: the XIDs seen, the sticky XID reasons and when
 * each reason was first seen. `now` is passed in so tests control time.
 */
export class GpuHealthTracker {
  readonly #gpus = new Map<
    string,
    { xids: { xid: number; at: number }[]; sticky: Map<string, Finding>; since: Map<string, number> }
  >();

  update(uuid: string, evidence: GpuEvidence, now: number): GpuHealth {
    let gpu = this.#gpus.get(uuid);
    if (!gpu) {
      gpu = { xids: [], sticky: new Map(), since: new Map() };
      this.#gpus.set(uuid, gpu);
    }
    for (const xid of evidence.xids) {
      gpu.xids.push({ xid, at: now });
      const finding = xidFinding(xid);
      if (finding) gpu.sticky.set(finding.code, finding);
    }
    gpu.xids.splice(0, Math.max(0, gpu.xids.length - MAX_XIDS));
    const findings = [...gpu.sticky.values(), ...judgeEvidence(evidence)];
    const present = new Set(findings.map((f) => `${f.code}\u0000${f.source}`));
    for (const key of gpu.since.keys()) if (!present.has(key)) gpu.since.delete(key);
    const reasons: GpuHealthReason[] = findings.map((f) => {
      const key = `${f.code}\u0000${f.source}`;
      const since = gpu.since.get(key) ?? now;
      gpu.since.set(key, since);
      return { ...f, since };
    });
    return {
      state: worst(reasons),
      reasons,
      ecc: evidence.ecc,
      retiredPages: evidence.retiredPages,
      rowRemap: evidence.rowRemap,
      throttleReasons: evidence.clockEvents ? clockEventReasonNames(evidence.clockEvents.mask) : null,
      slowdownTemperatureC: evidence.slowdownTemperatureC,
      pcie: evidence.pcie,
      xids: gpu.xids.map((x) => ({ ...x })),
    };
  }
}

/** Evidence for a GPU the sampler could not read at all this time (hung call): everything unknown. */
export function unknownEvidence(extra: Partial<GpuEvidence> = {}): GpuEvidence {
  return {
    ecc: null,
    retiredPages: null,
    rowRemap: null,
    clockEvents: null,
    slowdownTemperatureC: null,
    temperatureC: null,
    utilizationPercent: null,
    pcie: null,
    xids: [],
    lostAt: null,
    errors: [],
    ...extra,
  };
}
