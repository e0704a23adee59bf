import { describe, expect, it } from 'vitest';
import { sampleInventory, workloadSpec } from '../../../test/agent/fixtures.ts';
import {
  createMessage,
  decodeAgentMessage,
  decodeControlPlaneMessage,
  encodeMessage,
  ProtocolError,
} from './codec.ts';
import {
  isProtocolCompatible,
  MAX_FRAME_BYTES,
  PROTOCOL_VERSION,
  protocolMismatchReason,
} from './version.ts';

describe('protocol codec', () => {
  it('round-trips a hello and a desired state', () => {
    const hello = createMessage('hello', {
      agentVersion: '0.1.0',
      hostId: 'host_1',
      credential: 'secret',
      inventory: sampleInventory(),
    });
    const decoded = decodeAgentMessage(encodeMessage(hello));
    expect(decoded).toEqual({ ok: true, message: hello });
    expect(hello.v).toBe(PROTOCOL_VERSION);

    const desired = createMessage('desired_state', { generation: 3, workloads: [workloadSpec('w1')] });
    expect(decodeControlPlaneMessage(encodeMessage(desired))).toEqual({ ok: true, message: desired });
  });

  it('answers reuse the id they answer', () => {
    const welcome = createMessage(
      'welcome',
      { hostId: 'h', heartbeatSeconds: 10, metricsSeconds: 15, serverVersion: '0.1.0', serverTime: 1 },
      { id: 'abc' },
    );
    expect(welcome.id).toBe('abc');
  });

  it.each([
    ['not json', '{nope', 'bad_json'],
    ['a bare number', '42', 'bad_envelope'],
    ['an array', '[1,2]', 'bad_envelope'],
    ['a missing id', JSON.stringify({ v: 1, type: 'heartbeat' }), 'bad_envelope'],
    ['a fractional version', JSON.stringify({ v: 1.5, type: 'heartbeat', id: 'x' }), 'bad_envelope'],
    ['an unknown type', JSON.stringify({ v: 1, type: 'rm -rf', id: 'x' }), 'unknown_type'],
    ['a prototype key as type', JSON.stringify({ v: 1, type: '__proto__', id: 'x' }), 'unknown_type'],
    [
      'a wrong field type',
      JSON.stringify({ v: 1, type: 'heartbeat', id: 'x', seq: 'one', sentAt: 1, uptimeSeconds: 1 }),
      'invalid_message',
    ],
    ['a message of the other direction', JSON.stringify({ v: 1, type: 'welcome', id: 'x' }), 'unknown_type'],
  ])('rejects %s', (_name, frame, code) => {
    const result = decodeAgentMessage(frame);
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.code).toBe(code);
  });

  it('rejects oversize frames before parsing them', () => {
    const result = decodeAgentMessage(Buffer.alloc(MAX_FRAME_BYTES + 1, 0x20));
    expect(result).toMatchObject({ ok: false, code: 'too_large' });
  });

  it('rejects a workload spec with a container-name-breaking id', () => {
    const bad = {
      ...createMessage('desired_state', { generation: 1, workloads: [] }),
      workloads: [workloadSpec('../etc')],
    };
    const result = decodeControlPlaneMessage(JSON.stringify(bad));
    expect(result).toMatchObject({ ok: false, code: 'invalid_message' });
    if (!result.ok) expect(result.error).toContain('/workloads/0/workloadId');
  });

  it('refuses frames of an incompatible version but still reads their head', () => {
    const frame = JSON.stringify({
      ...createMessage('heartbeat', { seq: 1, sentAt: 1, uptimeSeconds: 1 }),
      v: 99,
    });
    const result = decodeAgentMessage(frame);
    expect(result).toMatchObject({
      ok: false,
      code: 'unsupported_version',
      head: { v: 99, type: 'heartbeat' },
    });
  });

  it('decodes a refusal from any version, so a mismatched peer can say why', () => {
    const refusal = createMessage(
      'refusal',
      {
        code: 'protocol_incompatible',
        reason: 'speak 1',
        retryable: false,
        supportedVersions: { min: 7, max: 7 },
      },
      { v: 7 },
    );
    expect(decodeControlPlaneMessage(JSON.stringify(refusal))).toEqual({ ok: true, message: refusal });
  });

  it('refuses to encode a message that breaks its schema', () => {
    const bad = { ...createMessage('heartbeat', { seq: 1, sentAt: 1, uptimeSeconds: 1 }), seq: -1 };
    expect(() => encodeMessage(bad)).toThrow(ProtocolError);
  });

  it('explains a version mismatch in one sentence', () => {
    expect(isProtocolCompatible(PROTOCOL_VERSION)).toBe(true);
    expect(isProtocolCompatible(PROTOCOL_VERSION + 1)).toBe(false);
    expect(protocolMismatchReason('agent', 99)).toBe(
      `incompatible protocol version: agent speaks 99, control plane supports ${PROTOCOL_VERSION}; upgrade the control plane`,
    );
    expect(protocolMismatchReason('control plane', 0)).toBe(
      `incompatible protocol version: control plane speaks 0, agent supports ${PROTOCOL_VERSION}; upgrade the control plane`,
    );
  });
});
