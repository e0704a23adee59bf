import { describe, expect, it } from 'vitest';
import { createMessage, decodeControlPlaneMessage, encodeMessage } from './codec.ts';
import {
  decodeExit,
  decodeFrame,
  decodeResize,
  encodeExit,
  encodeFrame,
  encodeFrames,
  encodeResize,
  FrameSender,
  MAX_TUNNEL_CHUNK,
  TUNNEL_CHANNEL,
  TUNNEL_UPGRADE,
  type TunnelTarget,
  tunnelSignal,
} from './tunnel.ts';

describe('tunnel frames', () => {
  it('round-trips a channel byte and its payload', () => {
    const frame = encodeFrame(TUNNEL_CHANNEL.stderr, Buffer.from('oops'));
    expect(frame[0]).toBe(2);
    expect(decodeFrame(frame)).toEqual({ channel: TUNNEL_CHANNEL.stderr, payload: Buffer.from('oops') });
    expect(decodeFrame(encodeFrame(TUNNEL_CHANNEL.eof))).toEqual({ channel: 6, payload: Buffer.alloc(0) });
  });

  it('refuses empty frames and unknown channels', () => {
    expect(decodeFrame(Buffer.alloc(0))).toBeNull();
    expect(decodeFrame(Buffer.from([8, 1, 2]))).toBeNull();
    expect(decodeFrame(Buffer.from([255]))).toBeNull();
  });

  it('splits large payloads into bounded frames', () => {
    const payload = Buffer.alloc(MAX_TUNNEL_CHUNK * 2 + 5, 7);
    const frames = encodeFrames(TUNNEL_CHANNEL.stdin, payload);
    expect(frames.map((f) => f.length)).toEqual([MAX_TUNNEL_CHUNK + 1, MAX_TUNNEL_CHUNK + 1, 6]);
    expect(Buffer.concat(frames.map((f) => decodeFrame(f)!.payload)).equals(payload)).toBe(true);
  });

  it('joins the pieces of a payload into as few frames as fit, each byte once', () => {
    const pieces = [
      Buffer.alloc(100, 1),
      Buffer.alloc(MAX_TUNNEL_CHUNK, 2),
      Buffer.alloc(0),
      Buffer.alloc(7, 3),
    ];
    const frames = encodeFrames(TUNNEL_CHANNEL.stdout, pieces);
    expect(frames.map((f) => f.length)).toEqual([MAX_TUNNEL_CHUNK + 1, 108]);
    expect(frames.every((f) => f[0] === TUNNEL_CHANNEL.stdout)).toBe(true);
    expect(Buffer.concat(frames.map((f) => decodeFrame(f)!.payload)).equals(Buffer.concat(pieces))).toBe(
      true,
    );
    // Small pieces that arrive together cross as one frame.
    const small = [Buffer.from('ab'), Buffer.from('cd'), Buffer.from('e')];
    expect(encodeFrames(TUNNEL_CHANNEL.stdin, small).map((f) => decodeFrame(f)!.payload.toString())).toEqual([
      'abcde',
    ]);
    expect(encodeFrames(TUNNEL_CHANNEL.stdin, [Buffer.alloc(0)]).map((f) => f.length)).toEqual([1]);
  });

  it('encodes resize and exit, and rejects malformed ones', () => {
    expect(decodeResize(decodeFrame(encodeResize(132, 50))!.payload)).toEqual({ cols: 132, rows: 50 });
    expect(decodeResize(Buffer.from([0, 0, 0, 5]))).toBeNull();
    expect(decodeResize(Buffer.from([1]))).toBeNull();
    expect(decodeExit(decodeFrame(encodeExit(143))!.payload)).toBe(143);
    expect(decodeExit(decodeFrame(encodeExit(-1))!.payload)).toBe(-1);
    expect(decodeExit(decodeFrame(encodeExit(null))!.payload)).toBeNull();
  });

  it('names signals with or without SIG, and refuses the rest', () => {
    expect(tunnelSignal('SIGTERM')).toBe('TERM');
    expect(tunnelSignal('int')).toBe('INT');
    expect(tunnelSignal('SEGV')).toBeNull();
    expect(tunnelSignal('TERM; rm -rf /')).toBeNull();
  });
});

describe('FrameSender', () => {
  it('reports backpressure above the high-water mark and drains at the low-water mark', () => {
    const callbacks: (() => void)[] = [];
    const sender = new FrameSender({ send: (_data, cb) => callbacks.push(() => cb()) }, 100, 40);
    expect(sender.send(Buffer.alloc(60))).toBe(true);
    expect(sender.send(Buffer.alloc(60))).toBe(false);
    let drained = false;
    sender.onDrain(() => {
      drained = true;
    });
    callbacks.shift()!();
    expect(drained).toBe(false); // 60 outstanding, above 40
    callbacks.shift()!();
    expect(drained).toBe(true);
    expect(sender.outstanding).toBe(0);
  });

  it('remembers a send failure, drains waiters, and drops later frames', () => {
    const callbacks: ((error?: Error) => void)[] = [];
    const sender = new FrameSender({ send: (_data, cb) => callbacks.push(cb) }, 10, 5);
    sender.send(Buffer.alloc(50));
    let drained = false;
    sender.onDrain(() => {
      drained = true;
    });
    callbacks.shift()!(new Error('closed'));
    expect(drained).toBe(true);
    expect(sender.failed?.message).toBe('closed');
    expect(sender.send(Buffer.alloc(1))).toBe(false);
  });
});

describe('the open_tunnel command', () => {
  const base = {
    name: 'open_tunnel' as const,
    tunnelId: 'AAAAAAAAAAAAAAAAAAAAAA',
    token: 'B'.repeat(43),
    workloadId: 'cluster_abc',
  };
  const decode = (target: unknown) =>
    decodeControlPlaneMessage(
      JSON.stringify({ v: 1, type: 'command', id: 'c1', command: { ...base, target } }),
    );

  it('carries a stream or an exec target', () => {
    const exec: TunnelTarget = {
      kind: 'exec',
      command: ['sh'],
      tty: true,
      env: { TERM: 'xterm' },
      cols: 80,
      rows: 24,
      user: null,
      workingDir: null,
    };
    const message = createMessage('command', { command: { ...base, target: exec } });
    expect(decodeControlPlaneMessage(encodeMessage(message))).toMatchObject({ ok: true });
    expect(decode({ kind: 'stream', port: 8080 })).toMatchObject({ ok: true });
  });

  it('offers the raw upgrade on a stream target; a later version still decodes (the agent then dials a WebSocket)', () => {
    expect(TUNNEL_UPGRADE).toBe('anvil-tunnel/1');
    expect(decode({ kind: 'stream', port: 8080, upgrade: TUNNEL_UPGRADE })).toMatchObject({ ok: true });
    expect(decode({ kind: 'stream', port: 8080, upgrade: 'anvil-tunnel/9' })).toMatchObject({ ok: true });
    expect(decode({ kind: 'stream', port: 8080, upgrade: 'x'.repeat(65) })).toMatchObject({
      ok: false,
      code: 'invalid_message',
    });
  });

  it('refuses bad targets', () => {
    expect(decode({ kind: 'stream', port: 0 })).toMatchObject({ ok: false, code: 'invalid_message' });
    expect(
      decode({
        kind: 'exec',
        command: [],
        tty: false,
        env: {},
        cols: null,
        rows: null,
        user: null,
        workingDir: null,
      }),
    ).toMatchObject({ ok: false });
    expect(
      decode({
        kind: 'exec',
        command: ['sh'],
        tty: false,
        env: { 'A=B': 'x' },
        cols: null,
        rows: null,
        user: null,
        workingDir: null,
      }),
    ).toMatchObject({ ok: false });
    expect(decode({ kind: 'shell' })).toMatchObject({ ok: false });
  });
});
