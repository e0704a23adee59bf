import { describe, expect, it } from 'vitest';
import { DockerDemuxer } from './demux.ts';
import { tunnelUrl } from './url.ts';

function muxFrame(type: number, text: string): Buffer {
  const payload = Buffer.from(text);
  const header = Buffer.alloc(8);
  header[0] = type;
  header.writeUInt32BE(payload.length, 4);
  return Buffer.concat([header, payload]);
}

describe('DockerDemuxer', () => {
  it('splits stdout and stderr across arbitrary chunk boundaries', () => {
    const out: string[] = [];
    const demux = new DockerDemuxer((stream, payloads) =>
      out.push(`${stream}:${Buffer.concat(payloads).toString()}`),
    );
    const bytes = Buffer.concat([muxFrame(1, 'hello '), muxFrame(2, 'oops'), muxFrame(1, 'world')]);
    for (let at = 0; at < bytes.length; at += 3) demux.push(bytes.subarray(at, at + 3));
    expect(out).toEqual(['stdout:hello ', 'stderr:oops', 'stdout:world']);
    expect(demux.pendingBytes).toBe(0);
  });

  it('splits frames of every size across every pair of chunk boundaries', () => {
    const frames = [
      muxFrame(1, 'a'.repeat(20)),
      muxFrame(2, 'err'),
      muxFrame(1, ''),
      muxFrame(1, 'b'.repeat(9)),
    ];
    const bytes = Buffer.concat(frames);
    for (let first = 0; first <= bytes.length; first++) {
      for (let second = first; second <= bytes.length; second++) {
        const out: string[] = [];
        const demux = new DockerDemuxer((stream, payloads) =>
          out.push(`${stream}:${Buffer.concat(payloads).toString()}`),
        );
        demux.push(bytes.subarray(0, first));
        demux.push(bytes.subarray(first, second));
        demux.push(bytes.subarray(second));
        expect(out).toEqual([`stdout:${'a'.repeat(20)}`, 'stderr:err', `stdout:${'b'.repeat(9)}`]);
        expect(demux.pendingBytes).toBe(0);
      }
    }
  });

  it('hands on the frames of one stream that follow each other in a chunk as one run', () => {
    const runs: string[][] = [];
    const demux = new DockerDemuxer((stream, payloads) =>
      runs.push([stream, ...payloads.map((p) => p.toString())]),
    );
    demux.push(
      Buffer.concat([
        muxFrame(1, 'a'),
        muxFrame(1, 'b'),
        muxFrame(1, 'c'),
        muxFrame(2, 'e'),
        muxFrame(1, 'd'),
        muxFrame(1, 'x').subarray(0, 5),
      ]),
    );
    // Three Docker frames, one run (one tunnel frame); the stream changing ends a run.
    expect(runs).toEqual([
      ['stdout', 'a', 'b', 'c'],
      ['stderr', 'e'],
      ['stdout', 'd'],
    ]);
    demux.push(muxFrame(1, 'x').subarray(5));
    expect(runs.at(-1)).toEqual(['stdout', 'x']);
  });

  it('holds an incomplete frame until the rest arrives', () => {
    const out: string[] = [];
    const demux = new DockerDemuxer((_stream, payloads) => out.push(Buffer.concat(payloads).toString()));
    const frame = muxFrame(1, 'abcdef');
    demux.push(frame.subarray(0, 10));
    expect(out).toEqual([]);
    expect(demux.pendingBytes).toBe(10);
    demux.push(frame.subarray(10));
    expect(out).toEqual(['abcdef']);
  });
});

describe('tunnelUrl', () => {
  it('maps the control plane to the tunnel path', () => {
    expect(tunnelUrl('https://cp.example.com')).toBe('wss://cp.example.com/agent/v1/tunnel');
    expect(tunnelUrl('http://127.0.0.1:8080/')).toBe('ws://127.0.0.1:8080/agent/v1/tunnel');
    expect(tunnelUrl('http://host/prefix')).toBe('ws://host/prefix/agent/v1/tunnel');
  });
});
