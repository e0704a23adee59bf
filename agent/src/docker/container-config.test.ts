import { describe, expect, it } from 'vitest';
import { workloadSpec } from '../../../test/agent/fixtures.ts';
import {
  assertConfined,
  buildCreateOptions,
  CAPABILITIES_KEPT,
  DEFAULT_PIDS_LIMIT,
} from './container-config.ts';
import { specHash } from './labels.ts';

const context = {
  hostId: 'host_a',
  volumeRoot: '/var/lib/anvil/volumes',
  gpuMode: 'device-requests' as const,
  specHash: 'h',
};

describe('buildCreateOptions', () => {
  it('maps every field of the spec', () => {
    const spec = workloadSpec('w1', {
      command: ['python', 'train.py'],
      entrypoint: ['/bin/sh', '-c'],
      env: { A: '1', NVIDIA_VISIBLE_DEVICES: 'all' },
      labels: { team: 'ml', 'anvil.host': 'forged' },
      gpus: [
        { index: 0, uuid: 'GPU-aaa' },
        { index: 1, uuid: 'GPU-bbb' },
      ],
      cpus: 1.5,
      memoryBytes: 512 * 1024 * 1024,
      shmBytes: 64 * 1024 * 1024,
      ports: [
        { containerPort: 8888, protocol: 'tcp', hostPort: null, hostIp: null },
        { containerPort: 8888, protocol: 'tcp', hostPort: 18888, hostIp: '127.0.0.1' },
        { containerPort: 53, protocol: 'udp', hostPort: 5353, hostIp: null },
      ],
      volume: { containerPath: '/workspace' },
      restartPolicy: { name: 'on-failure', maxRetries: 3 },
      stopGraceSeconds: 30,
      accountId: 'acct_1',
      pidsLimit: 512,
    });
    const options = buildCreateOptions(spec, context);
    expect(options).toEqual({
      name: 'anvil-w1',
      Image: 'anvil-test/busybox:latest',
      Cmd: ['python', 'train.py'],
      Entrypoint: ['/bin/sh', '-c'],
      Env: ['A=1', 'NVIDIA_VISIBLE_DEVICES=GPU-aaa,GPU-bbb'],
      Labels: {
        team: 'ml',
        'anvil.managed': 'true',
        'anvil.workload': 'w1',
        'anvil.host': 'host_a',
        'anvil.spec-hash': 'h',
        'anvil.stop-grace': '30',
      },
      ExposedPorts: { '8888/tcp': {}, '53/udp': {} },
      StopTimeout: 30,
      HostConfig: {
        RestartPolicy: { Name: 'on-failure', MaximumRetryCount: 3 },
        // Nothing is published on the host: the spec's hostIp/hostPort are not honoured.
        PortBindings: {},
        NetworkMode: 'anvil-acct-acct_1',
        CapDrop: ['ALL'],
        CapAdd: [...CAPABILITIES_KEPT],
        SecurityOpt: ['no-new-privileges:true'],
        PidsLimit: 512,
        NanoCpus: 1_500_000_000,
        Memory: 512 * 1024 * 1024,
        MemorySwap: 512 * 1024 * 1024,
        ShmSize: 64 * 1024 * 1024,
        Binds: ['/var/lib/anvil/volumes/w1:/workspace'],
        DeviceRequests: [
          { Driver: 'nvidia', DeviceIDs: ['GPU-aaa', 'GPU-bbb'], Capabilities: [['gpu']], Count: 0 },
        ],
      },
    });
  });

  it('caps the CPU limit at the host’s CPUs, which dockerd refuses to exceed', () => {
    const spec = workloadSpec('w-cpus', { cpus: 8 });
    expect(buildCreateOptions(spec, { ...context, hostCpus: 2 }).HostConfig?.NanoCpus).toBe(2_000_000_000);
    expect(buildCreateOptions(spec, { ...context, hostCpus: 16 }).HostConfig?.NanoCpus).toBe(8_000_000_000);
  });

  it('gives simulated GPUs only the env variable, and GPU-less containers none at all', () => {
    const gpus = [{ index: 0, uuid: 'GPU-sim-0' }];
    const simulated = buildCreateOptions(workloadSpec('w2', { gpus }), { ...context, gpuMode: 'env-only' });
    expect(simulated.HostConfig?.DeviceRequests).toBeUndefined();
    expect(simulated.Env).toContain('NVIDIA_VISIBLE_DEVICES=GPU-sim-0');
    const none = buildCreateOptions(workloadSpec('w3'), context);
    expect(none.HostConfig?.DeviceRequests).toBeUndefined();
    expect(none.Env).toEqual(['NVIDIA_VISIBLE_DEVICES=void']);
  });

  it('mounts each download read-only from the cache, by digest, and leaves downloads out of the spec hash', () => {
    const sha256 = 'ab'.repeat(32);
    const download = {
      path: '/agent/v1/downloads/datasets/ds_1/versions/dsv_1',
      sha256,
      sizeBytes: 5,
      containerPath: '/anvil/dataset/data.jsonl',
    };
    const spec = workloadSpec('w1', { volume: { containerPath: '/workspace' }, downloads: [download] });
    const withCache = { ...context, downloadRoot: '/var/lib/anvil/volumes/.downloads' };
    expect(buildCreateOptions(spec, withCache).HostConfig?.Binds).toEqual([
      '/var/lib/anvil/volumes/w1:/workspace',
      `/var/lib/anvil/volumes/.downloads/${sha256}:/anvil/dataset/data.jsonl:ro`,
    ]);
    expect(() => buildCreateOptions(spec, context)).toThrow('no download cache');
    const { downloads: _downloads, ...without } = spec;
    expect(specHash(spec, context)).toBe(specHash(without, context));
  });

  it('publishes ports only on the direct-ports address, from its range, when the operator enables it', () => {
    const spec = workloadSpec('w5', {
      ports: [{ containerPort: 8888, protocol: 'tcp', hostPort: 80, hostIp: '0.0.0.0' }],
    });
    const direct = { ...context, directPorts: { address: '10.0.0.5', first: 30000, last: 30099 } };
    expect(buildCreateOptions(spec, direct).HostConfig?.PortBindings).toEqual({
      '8888/tcp': [{ HostIp: '10.0.0.5', HostPort: '30000-30099' }],
    });
    expect(buildCreateOptions(spec, context).HostConfig?.PortBindings).toEqual({});
    expect(specHash(spec, direct)).not.toBe(specHash(spec, context));
  });

  it('leaves a workload without an account (an older control plane) on the default bridge, with the default PID limit', () => {
    const options = buildCreateOptions(workloadSpec('w6'), context);
    expect(options.HostConfig?.NetworkMode).toBe('bridge');
    expect(options.HostConfig?.PidsLimit).toBe(DEFAULT_PIDS_LIMIT);
  });

  it('refuses a create body that would reach onto the host', () => {
    const good = buildCreateOptions(workloadSpec('w7', { volume: { containerPath: '/workspace' } }), context);
    const roots = { volumeRoot: context.volumeRoot };
    const withHost = (extra: object) => ({ ...good, HostConfig: { ...good.HostConfig, ...extra } });
    expect(() => assertConfined(good, roots)).not.toThrow();
    expect(() => assertConfined(withHost({ Privileged: true }), roots)).toThrow('privileged');
    expect(() => assertConfined(withHost({ NetworkMode: 'host' }), roots)).toThrow('network mode');
    expect(() => assertConfined(withHost({ NetworkMode: 'container:abc' }), roots)).toThrow('network mode');
    expect(() => assertConfined(withHost({ PidMode: 'host' }), roots)).toThrow('PID mode');
    expect(() => assertConfined(withHost({ IpcMode: 'host' }), roots)).toThrow('IPC mode');
    expect(() => assertConfined(withHost({ CapAdd: ['SYS_ADMIN'] }), roots)).toThrow('SYS_ADMIN');
    expect(() => assertConfined(withHost({ CapDrop: [] }), roots)).toThrow('capabilities not dropped');
    expect(() => assertConfined(withHost({ SecurityOpt: [] }), roots)).toThrow('no-new-privileges');
    expect(() => assertConfined(withHost({ PidsLimit: 0 }), roots)).toThrow('PID limit');
    expect(() => assertConfined(withHost({ Binds: ['/etc:/host-etc'] }), roots)).toThrow('/etc');
    expect(() =>
      assertConfined(withHost({ Binds: ['/var/lib/anvil/volumes/../../../etc:/x'] }), roots),
    ).toThrow('outside');
    expect(() => assertConfined(withHost({ Binds: ['/var/lib/anvil/volumes:/all'] }), roots)).toThrow(
      'outside',
    );
    expect(() =>
      assertConfined(withHost({ PortBindings: { '80/tcp': [{ HostIp: '', HostPort: '' }] } }), roots),
    ).toThrow('every address');
  });

  it('keeps the image command when the spec gives none', () => {
    const options = buildCreateOptions(workloadSpec('w4', { command: null }), context);
    expect(options.Cmd).toBeUndefined();
    expect(options.Entrypoint).toBeUndefined();
  });
});

describe('specHash', () => {
  const ctx = { volumeRoot: '/v', gpuMode: 'env-only' as const };
  it('ignores key order and the stop grace, and changes with anything else', () => {
    const a = workloadSpec('w', { env: { A: '1', B: '2' } });
    const b = { ...workloadSpec('w', { env: { B: '2', A: '1' } }), stopGraceSeconds: 99 };
    expect(specHash(a, ctx)).toBe(specHash(b, ctx));
    expect(specHash(a, ctx)).not.toBe(specHash({ ...a, image: 'other' }, ctx));
    expect(specHash(a, ctx)).not.toBe(specHash(a, { ...ctx, gpuMode: 'device-requests' }));
  });
});
