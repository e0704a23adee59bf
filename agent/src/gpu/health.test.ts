import { GpuHealth } from '@anvil/shared/protocol';
import { Value } from '@sinclair/typebox/value';
import { describe, expect, it } from 'vitest';
import { type GpuEvidence, GpuHealthTracker, judgeEvidence, unknownEvidence } from './health.ts';

const clean = (extra: Partial<GpuEvidence> = {}): GpuEvidence =>
  unknownEvidence({
    ecc: { volatileCorrected: 0, volatileUncorrected: 0, aggregateCorrected: 3, aggregateUncorrected: 1 },
    retiredPages: { singleBitEcc: 0, doubleBitEcc: 0, pending: false },
    rowRemap: { correctable: 0, uncorrectable: 0, pending: false, failure: false },
    clockEvents: { mask: 0x1 | 0x4, source: 'nvmlDeviceGetCurrentClocksEventReasons' },
    slowdownTemperatureC: 87,
    temperatureC: 60,
    utilizationPercent: 90,
    pcie: { currentGen: 5, maxGen: 5, currentWidth: 16, maxWidth: 16 },
    ...extra,
  });
const codes = (e: GpuEvidence) => judgeEvidence(e).map((f) => `${f.severity}:${f.code}:${f.source}`);

describe('GPU health rules', () => {
  it('a clean GPU is healthy; aggregate history, idle and power cap judge nothing', () => {
    expect(codes(clean())).toEqual([]);
    const health = new GpuHealthTracker().update('GPU-a', clean(), 1000);
    expect(health.state).toBe('healthy');
    expect(health.throttleReasons).toEqual(['gpu_idle', 'sw_power_cap']);
    expect(Value.Check(GpuHealth, health)).toBe(true);
  });

  it('judges each kind of evidence with its severity and NVML source', () => {
    expect(codes(clean({ lostAt: 'nvmlDeviceGetPowerUsage' }))).toEqual([
      'failed:gpu_lost:nvmlDeviceGetPowerUsage',
    ]);
    expect(
      codes(
        clean({
          ecc: {
            volatileCorrected: 1000,
            volatileUncorrected: 2,
            aggregateCorrected: 0,
            aggregateUncorrected: 0,
          },
        }),
      ),
    ).toEqual([
      'failed:ecc_uncorrected_volatile:nvmlDeviceGetTotalEccErrors',
      'degraded:ecc_corrected_volatile:nvmlDeviceGetTotalEccErrors',
    ]);
    expect(
      codes(
        clean({
          ecc: {
            volatileCorrected: 999,
            volatileUncorrected: 0,
            aggregateCorrected: null,
            aggregateUncorrected: null,
          },
        }),
      ),
    ).toEqual([]);
    expect(
      codes(clean({ rowRemap: { correctable: 1, uncorrectable: 1, pending: true, failure: true } })),
    ).toEqual([
      'failed:row_remap_failure:nvmlDeviceGetRemappedRows',
      'degraded:row_remap_pending:nvmlDeviceGetRemappedRows',
    ]);
    expect(codes(clean({ retiredPages: { singleBitEcc: 2, doubleBitEcc: 1, pending: true } }))).toEqual([
      'degraded:retired_pages_pending:nvmlDeviceGetRetiredPagesPendingStatus',
    ]);
    const src = 'nvmlDeviceGetCurrentClocksThrottleReasons';
    expect(codes(clean({ clockEvents: { mask: 0x20 | 0x80, source: src } }))).toEqual([
      `degraded:throttle_thermal:${src}`,
      `degraded:throttle_power_brake:${src}`,
    ]);
    expect(codes(clean({ clockEvents: { mask: 0x8, source: src } }))).toEqual([
      `degraded:throttle_hw_slowdown:${src}`,
    ]);
    // hw_slowdown alongside hw_thermal is the thermal cause, said once.
    expect(codes(clean({ clockEvents: { mask: 0x8 | 0x40, source: src } }))).toEqual([
      `degraded:throttle_thermal:${src}`,
    ]);
    expect(codes(clean({ temperatureC: 82 }))).toEqual([
      'degraded:temperature_near_slowdown:nvmlDeviceGetTemperatureThreshold',
    ]);
    expect(codes(clean({ temperatureC: 81 }))).toEqual([]);
    expect(codes(clean({ pcie: { currentGen: 5, maxGen: 5, currentWidth: 8, maxWidth: 16 } }))).toEqual([
      'degraded:pcie_link_downgraded:nvmlDeviceGetCurrPcieLinkWidth',
    ]);
    expect(codes(clean({ pcie: { currentGen: 3, maxGen: 5, currentWidth: 16, maxWidth: 16 } }))).toEqual([
      'degraded:pcie_link_downgraded:nvmlDeviceGetCurrPcieLinkGeneration',
    ]);
    // An idle GPU lowers its link generation to save power: normal.
    expect(
      codes(
        clean({ utilizationPercent: 0, pcie: { currentGen: 1, maxGen: 5, currentWidth: 16, maxWidth: 16 } }),
      ),
    ).toEqual([]);
    expect(
      codes(clean({ errors: [{ fn: 'nvmlDeviceGetMemoryInfo', code: 999, message: 'Unknown Error' }] })),
    ).toEqual(['degraded:nvml_error:nvmlDeviceGetMemoryInfo']);
    expect(codes(unknownEvidence({ timedOut: { fn: 'nvmlDeviceGetPowerUsage', ms: 500 } }))).toEqual([
      'degraded:nvml_timeout:nvmlDeviceGetPowerUsage',
    ]);
  });

  it('critical XIDs judge the GPU and stay; other XIDs are only listed; since is the first sighting', () => {
    const tracker = new GpuHealthTracker();
    expect(tracker.update('GPU-a', clean({ xids: [13, 94] }), 1000)).toMatchObject({
      state: 'degraded',
      reasons: [{ code: 'xid_94', severity: 'degraded', source: 'nvmlEventSetWait_v2', since: 1000 }],
      xids: [
        { xid: 13, at: 1000 },
        { xid: 94, at: 1000 },
      ],
    });
    const hot = clean({ xids: [79], temperatureC: 86 });
    const second = tracker.update('GPU-a', hot, 2000);
    expect(second.state).toBe('failed');
    expect(second.reasons.map((r) => [r.code, r.since])).toEqual([
      ['xid_94', 1000],
      ['xid_79', 2000],
      ['temperature_near_slowdown', 2000],
    ]);
    const third = tracker.update('GPU-a', clean({ temperatureC: 86 }), 3000);
    expect(third.reasons.map((r) => [r.code, r.since])).toEqual([
      ['xid_94', 1000],
      ['xid_79', 2000],
      ['temperature_near_slowdown', 2000],
    ]);
    // The condition clears, then returns: a new first sighting. XIDs remain.
    const cooled = tracker.update('GPU-a', clean(), 4000);
    expect(cooled.reasons.map((r) => r.code)).toEqual(['xid_94', 'xid_79']);
    const again = tracker.update('GPU-a', clean({ temperatureC: 86 }), 5000);
    expect(again.reasons.at(-1)).toMatchObject({ code: 'temperature_near_slowdown', since: 5000 });
    // Another GPU is judged on its own.
    expect(tracker.update('GPU-b', clean(), 5000).state).toBe('healthy');
    expect(Value.Check(GpuHealth, again)).toBe(true);
  });

  it('keeps at most the 32 newest XIDs', () => {
    const tracker = new GpuHealthTracker();
    const many = Array.from({ length: 40 }, (_, i) => 1000 + i);
    const health = tracker.update('GPU-a', clean({ xids: many }), 1);
    expect(health.xids).toHaveLength(32);
    expect(health.xids[0]?.xid).toBe(1008);
    expect(health.state).toBe('healthy');
  });
});
