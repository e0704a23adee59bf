import { Duplex } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { MAX_MESSAGE_BYTES, SftpChannel, type SftpRequest } from './sftp-wire.ts';

/** A subsystem channel: what the client sends is pushed in, what the server writes is recorded. */
function fakeChannel() {
  const written: Buffer[] = [];
  const channel = new Duplex({
    read() {},
    write(chunk: Buffer, _encoding, callback) {
      written.push(chunk);
      callback();
    },
  });
  return { channel, written };
}

const u32 = (n: number) => {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n);
  return b;
};
const str = (s: string | Buffer) => Buffer.concat([u32(Buffer.byteLength(s)), Buffer.from(s)]);
const u64 = (n: number) => {
  const b = Buffer.alloc(8);
  b.writeBigUInt64BE(BigInt(n));
  return b;
};
const message = (type: number, ...fields: Buffer[]) => {
  const body = Buffer.concat([Buffer.of(type), ...fields]);
  return Buffer.concat([u32(body.length), body]);
};
// A pushed chunk reaches the channel on the next tick and its replies go out on the immediate after
// that: two turns of the event loop see both.
const turn = () => new Promise((resolve) => setImmediate(resolve));
const tick = async () => {
  await turn();
  await turn();
};

function session() {
  const { channel, written } = fakeChannel();
  const requests: SftpRequest[] = [];
  const errors: string[] = [];
  const sftp = new SftpChannel(
    channel,
    {
      request: (r) => requests.push(r),
      end: () => {},
      close: () => {},
      protocolError: (m) => errors.push(m),
    },
    { 'limits@openssh.com': '1' },
  );
  return { channel, written, requests, errors, sftp };
}

describe('SftpChannel', () => {
  it('answers INIT with version 3 and its extensions, then parses requests split anywhere', async () => {
    const s = session();
    s.channel.push(message(1, u32(3)));
    await tick();
    expect(Buffer.concat(s.written)).toEqual(message(2, u32(3), str('limits@openssh.com'), str('1')));

    const data = Buffer.alloc(70_000, 7);
    const bytes = Buffer.concat([
      message(5, u32(7), str('h1'), u64(2 ** 40), u32(65_536)),
      message(6, u32(8), str('h1'), u64(3), str(data)),
      message(3, u32(9), str('/tmp/ü'), u32(0x1a), u32(0x4), u32(0o640)),
      message(200, u32(10), str('limits@openssh.com')),
    ]);
    // One byte at a time: lengths and bodies cut at every place.
    for (let at = 0; at < bytes.length; at += 997) s.channel.push(bytes.subarray(at, at + 997));
    await tick();
    expect(s.requests).toEqual([
      { type: 'READ', id: 7, handle: Buffer.from('h1'), offset: 2 ** 40, length: 65_536 },
      { type: 'WRITE', id: 8, handle: Buffer.from('h1'), offset: 3, data },
      { type: 'OPEN', id: 9, path: '/tmp/ü', flags: 0x1a, attrs: { mode: 0o640 } },
      { type: 'EXTENDED', id: 10, name: 'limits@openssh.com', data: Buffer.alloc(0) },
    ]);
  });

  it('writes the replies of one turn together, in order, as one write (full SSH packets)', async () => {
    const s = session();
    s.channel.push(message(1, u32(3)));
    await tick();
    s.written.length = 0;
    const part1 = Buffer.alloc(40_000, 1);
    const part2 = Buffer.alloc(30_000, 2);
    s.sftp.status(1, 0);
    s.sftp.data(2, [part1, part2]);
    s.sftp.attrs(3, { size: 5, uid: 1, gid: 2, mode: 0o100644, atime: 10, mtime: 20 });
    expect(s.written).toEqual([]);
    await tick();
    const out = Buffer.concat(s.written);
    expect(out).toEqual(
      Buffer.concat([
        message(101, u32(1), u32(0), str('Success'), str('en')),
        message(103, u32(2), u32(70_000), part1, part2),
        message(105, u32(3), u32(0xf), u64(5), u32(1), u32(2), u32(0o100644), u32(10), u32(20)),
      ]),
    );
    // One write: ssh2 makes a packet of every write, so pieces written apart would be packets apart.
    expect(s.written).toHaveLength(1);
  });

  it('ends the session on a message longer than the protocol allows or malformed', async () => {
    const s = session();
    s.channel.push(message(1, u32(3)));
    s.channel.push(u32(MAX_MESSAGE_BYTES + 4096));
    await tick();
    expect(s.errors).toHaveLength(1);

    const t = session();
    t.channel.push(message(1, u32(3)));
    t.channel.push(message(5, u32(1), str('h')));
    await tick();
    expect(t.errors[0]).toMatch(/malformed/);
    expect(t.requests).toEqual([]);
  });
});
