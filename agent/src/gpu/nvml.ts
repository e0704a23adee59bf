import koffi from 'koffi';

/** nvmlReturn_t codes the agent tells apart; the rest are reported by NVML's own string. */
export const NVML_SUCCESS = 0;
export const NVML_ERROR_NOT_SUPPORTED = 3;
export const NVML_ERROR_INSUFFICIENT_SIZE = 7;
export const NVML_ERROR_NO_PERMISSION = 4;
export const NVML_ERROR_TIMEOUT = 10;
export const NVML_ERROR_GPU_IS_LOST = 15;
/** Returned by every call once the driver went away under a live library (driver reload). */
export const NVML_ERROR_UNINITIALIZED = 1;
export const NVML_ERROR_DRIVER_NOT_LOADED = 9;

/** nvmlEventTypeXidCriticalError (nvml.h): the only event type the agent registers for. */
export const NVML_EVENT_TYPE_XID_CRITICAL_ERROR = 0x8n;

/** Real NVML reports ULLONG_MAX for "not available" in process memory (e.g. no permission). */
const NVML_VALUE_NOT_AVAILABLE = 0xffff_ffff_ffff_ffffn;

export class NvmlError extends Error {
  constructor(
    readonly fn: string,
    readonly code: number,
    text: string,
  ) {
    super(`${fn}: ${text} (nvml ${code})`);
    this.name = 'NvmlError';
  }
}

export interface NvmlMemory {
  total: number;
  free: number;
  used: number;
}

export interface NvmlProcess {
  pid: number;
  usedMemoryBytes: number | null;
}

/** Opaque nvmlDevice_t. */
export type NvmlDevice = unknown;

/** The NVML calls the agent makes, each throwing NvmlError on a non-success return. */
export interface Nvml {
  readonly libraryPath: string;
  init(): void;
  shutdown(): void;
  driverVersion(): string;
  /** CUDA driver API version as NVML encodes it: 12040 = 12.4. */
  cudaDriverVersion(): number;
  deviceCount(): number;
  deviceByIndex(index: number): NvmlDevice;
  name(device: NvmlDevice): string;
  uuid(device: NvmlDevice): string;
  memory(device: NvmlDevice): NvmlMemory;
  pciBusId(device: NvmlDevice): string;
  utilization(device: NvmlDevice): { gpu: number; memory: number };
  /** Degrees C of the GPU die sensor. */
  temperature(device: NvmlDevice): number;
  powerMilliwatts(device: NvmlDevice): number;
  smClockMhz(device: NvmlDevice): number;
  memoryClockMhz(device: NvmlDevice): number;
  computeProcesses(device: NvmlDevice): NvmlProcess[];
  /** nvmlDeviceGetTotalEccErrors: corrected (0) or uncorrected (1), volatile (0) or aggregate (1). */
  totalEccErrors(device: NvmlDevice, errorType: 0 | 1, counter: 0 | 1): number;
  /** nvmlDeviceGetRetiredPages_v2's page count for one cause: 0 multiple single-bit, 1 double-bit. */
  retiredPageCount(device: NvmlDevice, cause: 0 | 1): number;
  retiredPagesPending(device: NvmlDevice): boolean;
  remappedRows(device: NvmlDevice): NvmlRemappedRows;
  /** Bit mask of nvmlClocksEventReason*; `source` is the call that answered (older drivers lack the new name). */
  clocksEventReasons(device: NvmlDevice): { mask: number; source: string };
  /** nvmlDeviceGetTemperatureThreshold: 0 shutdown, 1 slowdown. */
  temperatureThreshold(device: NvmlDevice, threshold: 0 | 1): number;
  pcieLink(device: NvmlDevice, which: 'currentGen' | 'maxGen' | 'currentWidth' | 'maxWidth'): number;
  /** nvmlDeviceGetMigMode's current mode (pending mode applies after a reset). */
  migEnabled(device: NvmlDevice): boolean;
  /** A new event set with the device registered for critical XID events. */
  xidEventSet(device: NvmlDevice): NvmlEventSet;
  /** nvmlEventSetWait_v2: the XID of the next queued event, or null when none arrives in timeoutMs. */
  waitXid(set: NvmlEventSet, timeoutMs: number): number | null;
  freeEventSet(set: NvmlEventSet): void;
}

export interface NvmlRemappedRows {
  correctable: number;
  uncorrectable: number;
  pending: boolean;
  failure: boolean;
}

/** Opaque nvmlEventSet_t. */
export type NvmlEventSet = unknown;

// koffi keeps type definitions process-wide; define them once, anonymous so names never collide.
let types: ReturnType<typeof defineTypes> | null = null;
function defineTypes() {
  const ull = 'unsigned long long';
  return {
    Device: koffi.pointer(koffi.opaque()),
    Memory: koffi.struct({ total: ull, free: ull, used: ull }),
    Utilization: koffi.struct({ gpu: 'uint', memory: 'uint' }),
    // nvmlPciInfo_t as of NVML 11+ (what nvmlDeviceGetPciInfo_v3 fills).
    PciInfo: koffi.struct({
      busIdLegacy: koffi.array('char', 16),
      domain: 'uint',
      bus: 'uint',
      device: 'uint',
      pciDeviceId: 'uint',
      pciSubSystemId: 'uint',
      busId: koffi.array('char', 32),
    }),
    // nvmlProcessInfo_t (v2 layout) used by nvmlDeviceGetComputeRunningProcesses_v3.
    ProcessInfo: koffi.struct({
      pid: 'uint',
      usedGpuMemory: ull,
      gpuInstanceId: 'uint',
      computeInstanceId: 'uint',
    }),
    EventSet: koffi.pointer(koffi.opaque()),
    // nvmlEventData_t as nvmlEventSetWait_v2 fills it (nvml.h since CUDA 11: gpuInstanceId/computeInstanceId added).
    EventData: koffi.struct({
      device: 'void *',
      eventType: ull,
      eventData: ull,
      gpuInstanceId: 'uint',
      computeInstanceId: 'uint',
    }),
  };
}

/** The structs declared to koffi, for the layout test (test/nvml-layout.test.ts compares them with nvml.h). */
export function nvmlStructTypes() {
  types ??= defineTypes();
  const { Memory, Utilization, PciInfo, ProcessInfo, EventData } = types;
  return {
    nvmlMemory_t: Memory,
    nvmlUtilization_t: Utilization,
    nvmlPciInfo_t: PciInfo,
    nvmlProcessInfo_t: ProcessInfo,
    nvmlEventData_t: EventData,
  };
}

function toNumber(value: number | bigint): number {
  return typeof value === 'bigint' ? Number(value) : value;
}

const NVML_CLOCK_SM = 1;
const NVML_CLOCK_MEM = 2;
const NVML_TEMPERATURE_GPU = 0;
const STRING_BUFFER = 96;

/**
 * Load libnvidia-ml through koffi. Throws when the library is missing (no driver): the caller falls
 * back to nvidia-smi. Symbols are bound lazily so a driver that lacks one call breaks only that call.
 */
export function loadNvml(libraryPath = 'libnvidia-ml.so.1'): Nvml {
  const lib = koffi.load(libraryPath);
  types ??= defineTypes();
  const t = types;

  const bound = new Map<string, koffi.KoffiFunction>();
  const fn = (name: string, result: string, params: unknown[]) => {
    let f = bound.get(name);
    if (!f) {
      f = lib.func(name, result, params as koffi.TypeSpec[]);
      bound.set(name, f);
    }
    return f;
  };
  const errorString = (code: number): string => {
    try {
      return String(fn('nvmlErrorString', 'const char *', ['int'])(code));
    } catch {
      return 'unknown error';
    }
  };
  const check = (name: string, code: number) => {
    if (code !== NVML_SUCCESS) throw new NvmlError(name, code, errorString(code));
  };
  const call = (name: string, params: unknown[], args: unknown[]) =>
    check(name, fn(name, 'int', params)(...args));
  const readString = (name: string, params: unknown[], args: unknown[]) => {
    const buffer = Buffer.alloc(STRING_BUFFER);
    call(name, params, [...args, buffer, STRING_BUFFER]);
    const end = buffer.indexOf(0);
    return buffer.toString('utf8', 0, end < 0 ? buffer.length : end);
  };
  const outUint = (name: string, device: NvmlDevice, ...extra: number[]) => {
    const out = [0];
    call(
      name,
      [t.Device, ...extra.map(() => 'int'), koffi.out(koffi.pointer('uint'))],
      [device, ...extra, out],
    );
    return out[0] ?? 0;
  };

  const outUll = (name: string, params: unknown[], args: unknown[]) => {
    const out = [0n];
    call(name, [...params, koffi.out(koffi.pointer('unsigned long long'))], [...args, out]);
    return toNumber(out[0] ?? 0);
  };
  const PCIE_CALLS = {
    currentGen: 'nvmlDeviceGetCurrPcieLinkGeneration',
    maxGen: 'nvmlDeviceGetMaxPcieLinkGeneration',
    currentWidth: 'nvmlDeviceGetCurrPcieLinkWidth',
    maxWidth: 'nvmlDeviceGetMaxPcieLinkWidth',
  } as const;

  return {
    libraryPath,
    init: () => call('nvmlInit_v2', [], []),
    shutdown: () => call('nvmlShutdown', [], []),
    driverVersion: () => readString('nvmlSystemGetDriverVersion', ['char *', 'uint'], []),
    cudaDriverVersion: () => {
      const out = [0];
      call('nvmlSystemGetCudaDriverVersion', [koffi.out(koffi.pointer('int'))], [out]);
      return out[0] ?? 0;
    },
    deviceCount: () => {
      const out = [0];
      call('nvmlDeviceGetCount_v2', [koffi.out(koffi.pointer('uint'))], [out]);
      return out[0] ?? 0;
    },
    deviceByIndex: (index) => {
      const out: unknown[] = [null];
      call('nvmlDeviceGetHandleByIndex_v2', ['uint', koffi.out(koffi.pointer(t.Device))], [index, out]);
      return out[0];
    },
    name: (device) => readString('nvmlDeviceGetName', [t.Device, 'char *', 'uint'], [device]),
    uuid: (device) => readString('nvmlDeviceGetUUID', [t.Device, 'char *', 'uint'], [device]),
    memory: (device) => {
      const out: { total?: number | bigint; free?: number | bigint; used?: number | bigint } = {};
      call('nvmlDeviceGetMemoryInfo', [t.Device, koffi.out(koffi.pointer(t.Memory))], [device, out]);
      return {
        total: toNumber(out.total ?? 0),
        free: toNumber(out.free ?? 0),
        used: toNumber(out.used ?? 0),
      };
    },
    pciBusId: (device) => {
      const out: { busId?: string } = {};
      call('nvmlDeviceGetPciInfo_v3', [t.Device, koffi.out(koffi.pointer(t.PciInfo))], [device, out]);
      return out.busId ?? '';
    },
    utilization: (device) => {
      const out: { gpu?: number; memory?: number } = {};
      call(
        'nvmlDeviceGetUtilizationRates',
        [t.Device, koffi.out(koffi.pointer(t.Utilization))],
        [device, out],
      );
      return { gpu: out.gpu ?? 0, memory: out.memory ?? 0 };
    },
    temperature: (device) => outUint('nvmlDeviceGetTemperature', device, NVML_TEMPERATURE_GPU),
    powerMilliwatts: (device) => outUint('nvmlDeviceGetPowerUsage', device),
    smClockMhz: (device) => outUint('nvmlDeviceGetClockInfo', device, NVML_CLOCK_SM),
    memoryClockMhz: (device) => outUint('nvmlDeviceGetClockInfo', device, NVML_CLOCK_MEM),
    computeProcesses: (device) => {
      const name = 'nvmlDeviceGetComputeRunningProcesses_v3';
      const params = [t.Device, koffi.inout(koffi.pointer('uint')), 'void *'];
      const f = fn(name, 'int', params);
      const count = [0];
      const first = f(device, count, null) as number;
      if (first === NVML_SUCCESS) return [];
      if (first !== NVML_ERROR_INSUFFICIENT_SIZE) check(name, first);
      // Processes may start between the two calls: leave room for a few more.
      const capacity = (count[0] ?? 0) + 8;
      const buffer = Buffer.alloc(koffi.sizeof(t.ProcessInfo) * capacity);
      count[0] = capacity;
      check(name, f(device, count, buffer) as number);
      const n = count[0] ?? 0;
      if (n === 0) return [];
      const infos = koffi.decode(buffer, koffi.array(t.ProcessInfo, n)) as {
        pid: number;
        usedGpuMemory: number | bigint;
      }[];
      return infos.map((p) => ({
        pid: p.pid,
        usedMemoryBytes:
          BigInt(p.usedGpuMemory) === NVML_VALUE_NOT_AVAILABLE ? null : toNumber(p.usedGpuMemory),
      }));
    },
    totalEccErrors: (device, errorType, counter) =>
      outUll('nvmlDeviceGetTotalEccErrors', [t.Device, 'int', 'int'], [device, errorType, counter]),
    retiredPageCount: (device, cause) => {
      const name = 'nvmlDeviceGetRetiredPages_v2';
      const f = fn(name, 'int', [t.Device, 'int', koffi.inout(koffi.pointer('uint')), 'void *', 'void *']);
      // A zero-sized buffer asks for the count only; NVML answers INSUFFICIENT_SIZE when there are pages.
      const count = [0];
      const code = f(device, cause, count, null, null) as number;
      if (code !== NVML_ERROR_INSUFFICIENT_SIZE) check(name, code);
      return count[0] ?? 0;
    },
    retiredPagesPending: (device) => outUint('nvmlDeviceGetRetiredPagesPendingStatus', device) === 1,
    remappedRows: (device) => {
      const outs = [[0], [0], [0], [0]];
      const uint = () => koffi.out(koffi.pointer('uint'));
      call('nvmlDeviceGetRemappedRows', [t.Device, uint(), uint(), uint(), uint()], [device, ...outs]);
      const [corr, unc, pending, failure] = outs.map((o) => o[0] ?? 0);
      return {
        correctable: corr ?? 0,
        uncorrectable: unc ?? 0,
        pending: pending === 1,
        failure: failure === 1,
      };
    },
    clocksEventReasons: (device) => {
      // Renamed in NVML 12.2 (driver 535); the old name is kept by newer drivers but may go.
      for (const source of [
        'nvmlDeviceGetCurrentClocksEventReasons',
        'nvmlDeviceGetCurrentClocksThrottleReasons',
      ]) {
        let bound: boolean;
        try {
          fn(source, 'int', [t.Device, koffi.out(koffi.pointer('unsigned long long'))]);
          bound = true;
        } catch {
          bound = false;
        }
        if (bound) return { mask: outUll(source, [t.Device], [device]), source };
      }
      throw new NvmlError(
        'nvmlDeviceGetCurrentClocksEventReasons',
        NVML_ERROR_NOT_SUPPORTED,
        'Not Supported',
      );
    },
    temperatureThreshold: (device, threshold) =>
      outUint('nvmlDeviceGetTemperatureThreshold', device, threshold),
    pcieLink: (device, which) => outUint(PCIE_CALLS[which], device),
    migEnabled: (device) => {
      const current = [0];
      const pending = [0];
      call(
        'nvmlDeviceGetMigMode',
        [t.Device, koffi.out(koffi.pointer('uint')), koffi.out(koffi.pointer('uint'))],
        [device, current, pending],
      );
      return current[0] === 1;
    },
    xidEventSet: (device) => {
      const out: unknown[] = [null];
      call('nvmlEventSetCreate', [koffi.out(koffi.pointer(t.EventSet))], [out]);
      const set = out[0];
      try {
        call(
          'nvmlDeviceRegisterEvents',
          [t.Device, 'unsigned long long', t.EventSet],
          [device, NVML_EVENT_TYPE_XID_CRITICAL_ERROR, set],
        );
      } catch (err) {
        fn('nvmlEventSetFree', 'int', [t.EventSet])(set);
        throw err;
      }
      return set;
    },
    waitXid: (set, timeoutMs) => {
      const name = 'nvmlEventSetWait_v2';
      const out: { eventType?: number | bigint; eventData?: number | bigint } = {};
      const code = fn(name, 'int', [t.EventSet, koffi.out(koffi.pointer(t.EventData)), 'uint'])(
        set,
        out,
        timeoutMs,
      ) as number;
      if (code === NVML_ERROR_TIMEOUT) return null;
      check(name, code);
      return toNumber(out.eventData ?? 0);
    },
    freeEventSet: (set) => call('nvmlEventSetFree', [t.EventSet], [set]),
  };
}
