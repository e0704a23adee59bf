/**
 * The NVML sampler process: the only place the agent calls libnvidia-ml. nvml-sampler.ts forks it and
 * talks to it over the IPC channel; NVML's calls are synchronous and one can block for good (a GPU that
 * fell off the bus, a wedged driver), which here stalls only this process: the agent's event loop, and so
 * its heartbeats, never wait on NVML. A process rather than a worker thread because a thread stuck in a
 * native call can be neither stopped nor joined (Node would wait for it at exit); a process is killed.
 *
 * Started as `node nvml-child.js <libnvidia-ml path>` (the bundle, agent/dist/) or through tsx from the
 * sources. Protocol (one request at a time, answers in order):
 *   child -> { type: 'ready' } | { type: 'init-failed', error }        once, after nvmlInit_v2
 *   parent -> { type: 'inventory' | 'sample', skip: number[] }         GPUs in `skip` are not touched
 *   child -> { type: 'system', driverVersion, cudaVersion }            inventory only
 *            { type: 'count', count }  then per GPU not skipped, in index order,
 *            { type: 'item', index, item }  and { type: 'done' }
 *            or { type: 'fatal', error } when NVML itself is gone (the process then exits)
 * XID events queue in each GPU's event set (registered at the GPU's first sample) and are drained, without
 * waiting, at every sample: an XID's time is when the agent saw it, at most one sample interval late.
 * Events while no sampler process runs (between a kill and the next start) are not seen.
 */
import type { GpuDevice } from '@anvil/shared/protocol';
import { type GpuEvidence, type NvmlCallError, unknownEvidence } from './health.ts';
import { type GpuReadings, noReadings } from './no-readings.ts';
import {
  loadNvml,
  NVML_ERROR_GPU_IS_LOST,
  NVML_ERROR_NO_PERMISSION,
  NVML_ERROR_NOT_SUPPORTED,
  type Nvml,
  type NvmlDevice,
  NvmlError,
  type NvmlEventSet,
} from './nvml.ts';

export type ChildRequest = { type: 'inventory' | 'sample'; skip: number[] };

/** A GPU's inventory entry; uuid null when the GPU could not be read (lost). */
export type InventoryItem = Omit<GpuDevice, 'uuid'> & { uuid: string | null };

export interface SampleItem {
  uuid: string | null;
  metrics: GpuReadings;
  evidence: GpuEvidence;
}

export type ChildMessage =
  | { type: 'ready' }
  | { type: 'init-failed'; error: string }
  | { type: 'system'; driverVersion: string | null; cudaVersion: string | null }
  | { type: 'count'; count: number }
  | { type: 'item'; index: number; item: InventoryItem | SampleItem }
  | { type: 'done' }
  | { type: 'fatal'; error: string };

/** Most XIDs drained from one GPU's event set per sample (a storm must not stall the sample). */
const MAX_XIDS_PER_SAMPLE = 64;

function send(message: ChildMessage): void {
  process.send?.(message);
}

/** Reads one GPU: unsupported figures are null; a lost GPU stops further calls; other errors are kept. */
class GpuReader {
  lostAt: string | null = null;
  readonly errors: NvmlCallError[] = [];

  read<T>(fn: string, call: () => T): T | null {
    if (this.lostAt) return null;
    try {
      return call();
    } catch (err) {
      if (!(err instanceof NvmlError)) {
        this.errors.push({ fn, code: -1, message: String(err) });
        return null;
      }
      if (err.code === NVML_ERROR_GPU_IS_LOST) this.lostAt = err.fn;
      else if (err.code !== NVML_ERROR_NOT_SUPPORTED && err.code !== NVML_ERROR_NO_PERMISSION)
        this.errors.push({ fn: err.fn, code: err.code, message: err.message });
      return null;
    }
  }
}

function inventoryItem(nvml: Nvml, index: number, handle: NvmlDevice): InventoryItem {
  const r = new GpuReader();
  return {
    index,
    uuid: r.read('nvmlDeviceGetUUID', () => nvml.uuid(handle)),
    name: r.read('nvmlDeviceGetName', () => nvml.name(handle)) ?? '',
    memoryTotalBytes: r.read('nvmlDeviceGetMemoryInfo', () => nvml.memory(handle).total),
    pciBusId: r.read('nvmlDeviceGetPciInfo_v3', () => nvml.pciBusId(handle)),
    migEnabled: migEnabled(nvml, handle),
  };
}

/** A board without MIG answers NOT_SUPPORTED: it is not MIG-enabled. Any other failure: unknown. */
function migEnabled(nvml: Nvml, handle: NvmlDevice): boolean | null {
  try {
    return nvml.migEnabled(handle);
  } catch (err) {
    return err instanceof NvmlError && err.code === NVML_ERROR_NOT_SUPPORTED ? false : null;
  }
}

function sampleItem(nvml: Nvml, handle: NvmlDevice, events: NvmlEventSet | null): SampleItem {
  const r = new GpuReader();
  const xids: number[] = [];
  if (events) {
    for (let i = 0; i < MAX_XIDS_PER_SAMPLE; i++) {
      const xid = r.read('nvmlEventSetWait_v2', () => nvml.waitXid(events, 0));
      if (xid === null) break;
      xids.push(xid);
    }
  }
  const uuid = r.read('nvmlDeviceGetUUID', () => nvml.uuid(handle));
  const memory = r.read('nvmlDeviceGetMemoryInfo', () => nvml.memory(handle));
  const utilization = r.read('nvmlDeviceGetUtilizationRates', () => nvml.utilization(handle));
  const power = r.read('nvmlDeviceGetPowerUsage', () => nvml.powerMilliwatts(handle));
  const temperatureC = r.read('nvmlDeviceGetTemperature', () => nvml.temperature(handle));
  const metrics: SampleItem['metrics'] = {
    utilizationPercent: utilization?.gpu ?? null,
    memoryUtilizationPercent: utilization?.memory ?? null,
    memoryUsedBytes: memory?.used ?? null,
    memoryTotalBytes: memory?.total ?? null,
    temperatureC,
    powerWatts: power === null ? null : power / 1000,
    smClockMhz: r.read('nvmlDeviceGetClockInfo', () => nvml.smClockMhz(handle)),
    memoryClockMhz: r.read('nvmlDeviceGetClockInfo', () => nvml.memoryClockMhz(handle)),
    processes: r.read('nvmlDeviceGetComputeRunningProcesses_v3', () => nvml.computeProcesses(handle)) ?? [],
  };
  const ecc = (errorType: 0 | 1, counter: 0 | 1) =>
    r.read('nvmlDeviceGetTotalEccErrors', () => nvml.totalEccErrors(handle, errorType, counter));
  const eccCounts = {
    volatileCorrected: ecc(0, 0),
    volatileUncorrected: ecc(1, 0),
    aggregateCorrected: ecc(0, 1),
    aggregateUncorrected: ecc(1, 1),
  };
  const sbe = r.read('nvmlDeviceGetRetiredPages_v2', () => nvml.retiredPageCount(handle, 0));
  const dbe = r.read('nvmlDeviceGetRetiredPages_v2', () => nvml.retiredPageCount(handle, 1));
  const pending = r.read('nvmlDeviceGetRetiredPagesPendingStatus', () => nvml.retiredPagesPending(handle));
  const link = (which: 'currentGen' | 'maxGen' | 'currentWidth' | 'maxWidth', fn: string) =>
    r.read(fn, () => nvml.pcieLink(handle, which));
  const pcie = {
    currentGen: link('currentGen', 'nvmlDeviceGetCurrPcieLinkGeneration'),
    maxGen: link('maxGen', 'nvmlDeviceGetMaxPcieLinkGeneration'),
    currentWidth: link('currentWidth', 'nvmlDeviceGetCurrPcieLinkWidth'),
    maxWidth: link('maxWidth', 'nvmlDeviceGetMaxPcieLinkWidth'),
  };
  const evidence: GpuEvidence = {
    ecc: Object.values(eccCounts).every((v) => v === null) ? null : eccCounts,
    retiredPages:
      sbe === null || dbe === null || pending === null
        ? null
        : { singleBitEcc: sbe, doubleBitEcc: dbe, pending },
    rowRemap: r.read('nvmlDeviceGetRemappedRows', () => nvml.remappedRows(handle)),
    clockEvents: r.read('nvmlDeviceGetCurrentClocksEventReasons', () => nvml.clocksEventReasons(handle)),
    slowdownTemperatureC: r.read('nvmlDeviceGetTemperatureThreshold', () =>
      nvml.temperatureThreshold(handle, 1),
    ),
    temperatureC,
    utilizationPercent: utilization?.gpu ?? null,
    pcie: Object.values(pcie).every((v) => v === null) ? null : pcie,
    xids,
    lostAt: r.lostAt,
    errors: r.errors,
  };
  return { uuid, metrics, evidence };
}

function main(): void {
  const libraryPath = process.argv[2] ?? 'libnvidia-ml.so.1';
  let nvml: Nvml;
  try {
    nvml = loadNvml(libraryPath);
    nvml.init();
  } catch (err) {
    send({ type: 'init-failed', error: err instanceof Error ? err.message : String(err) });
    process.disconnect?.();
    return;
  }
  // One event set per GPU, made at its first sample: a GPU that does not support XID events has none.
  const eventSets = new Map<number, NvmlEventSet | null>();
  const eventSetOf = (index: number, handle: NvmlDevice) => {
    if (!eventSets.has(index)) {
      let set: NvmlEventSet | null = null;
      try {
        set = nvml.xidEventSet(handle);
      } catch {
        set = null;
      }
      eventSets.set(index, set);
    }
    return eventSets.get(index) ?? null;
  };

  process.on('message', (request: ChildRequest) => {
    let count: number;
    try {
      count = nvml.deviceCount();
    } catch (err) {
      // NVML lost its driver (reload, unload): this process is done; the parent starts a new one.
      send({ type: 'fatal', error: err instanceof Error ? err.message : String(err) });
      process.disconnect?.();
      return;
    }
    if (request.type === 'inventory') {
      const cuda = new GpuReader().read('nvmlSystemGetCudaDriverVersion', () => nvml.cudaDriverVersion());
      send({
        type: 'system',
        driverVersion: new GpuReader().read('nvmlSystemGetDriverVersion', () => nvml.driverVersion()),
        // NVML's 12040 -> "12.4".
        cudaVersion: cuda === null ? null : `${Math.floor(cuda / 1000)}.${Math.floor((cuda % 1000) / 10)}`,
      });
    }
    send({ type: 'count', count });
    const skip = new Set(request.skip);
    for (let index = 0; index < count; index++) {
      if (skip.has(index)) continue;
      let handle: NvmlDevice;
      try {
        handle = nvml.deviceByIndex(index);
      } catch (err) {
        const lost = err instanceof NvmlError && err.code === NVML_ERROR_GPU_IS_LOST;
        const evidence = lostEvidence(lost, err);
        send({
          type: 'item',
          index,
          item:
            request.type === 'inventory'
              ? { index, uuid: null, name: '', memoryTotalBytes: null, pciBusId: null, migEnabled: null }
              : { uuid: null, metrics: noReadings(), evidence },
        });
        continue;
      }
      const item =
        request.type === 'inventory'
          ? inventoryItem(nvml, index, handle)
          : sampleItem(nvml, handle, eventSetOf(index, handle));
      send({ type: 'item', index, item });
    }
    send({ type: 'done' });
  });
  // The agent went away: nothing left to answer.
  process.on('disconnect', () => process.exit(0));
  send({ type: 'ready' });
}

/** Evidence for a GPU whose handle NVML would not give: lost, or another error. */
function lostEvidence(lost: boolean, err: unknown): GpuEvidence {
  const fn = 'nvmlDeviceGetHandleByIndex_v2';
  if (lost) return unknownEvidence({ lostAt: fn });
  const code = err instanceof NvmlError ? err.code : -1;
  return unknownEvidence({
    errors: [{ fn, code, message: err instanceof Error ? err.message : String(err) }],
  });
}

main();
