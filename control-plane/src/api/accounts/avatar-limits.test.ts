import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AVATAR } from '../../accounts/profile.ts';
import { addMember, type TestMember } from '../../testing/accounts.ts';
import { createTestApp, type TestApp } from '../../testing/index.ts';

/** An animated GIF of `frames` distinct frames (a moving diagonal line), each side×side pixels. */
async function animatedGif(frames: number, side: number): Promise<Buffer> {
  const raw = Buffer.alloc(side * side * frames * 4);
  for (let i = 3; i < raw.length; i += 4) raw[i] = 255;
  for (let f = 0; f < frames; f++) {
    for (let y = 0; y < side; y++) {
      const at = ((f * side + y) * side + ((f * 7 + y) % side)) * 4;
      raw.fill(255, at, at + 3);
    }
  }
  return sharp(raw, { raw: { width: side, height: side * frames, channels: 4, pageHeight: side } })
    .gif()
    .toBuffer();
}

function multipart(bytes: Buffer) {
  const boundary = `----anvil${randomBytes(8).toString('hex')}`;
  const head = Buffer.from(
    `--${boundary}\r\nContent-Disposition: form-data; name="avatar"; filename="a.gif"\r\nContent-Type: image/gif\r\n\r\n`,
  );
  return {
    payload: Buffer.concat([head, bytes, Buffer.from(`\r\n--${boundary}--\r\n`)]),
    contentType: `multipart/form-data; boundary=${boundary}`,
  };
}

/**
 * What one avatar upload may make the control plane decode is bounded: frames of an animated GIF, and
 * pixels of all frames together (sharp's limitInputPixels), whatever the file's few bytes claim.
 */
describe('avatar decoding limits', () => {
  let t: TestApp;
  let dataDir: string;
  let dev: TestMember;

  beforeAll(async () => {
    dataDir = mkdtempSync(join(tmpdir(), 'anvil-avatar-limits-'));
    t = await createTestApp({ env: { ANVIL_DATA_DIR: dataDir } });
    dev = await addMember(t, { role: 'developer' });
  });
  afterAll(async () => {
    await t.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  const upload = (bytes: Buffer) => {
    const body = multipart(bytes);
    return t.app.inject({
      method: 'POST',
      url: '/v2/accounts/profile/avatar',
      headers: { authorization: `Bearer ${dev.key}`, 'content-type': body.contentType },
      payload: body.payload,
    });
  };

  it('refuses an animated GIF with more frames than the limit, and keeps no file', async () => {
    const res = await upload(await animatedGif(AVATAR.maxFrames + 50, 100));
    expect(res.statusCode, res.body).toBe(400);
    expect(res.json()).toMatchObject({
      error: 'VALIDATION_ERROR',
      details: { field: 'avatar', frames: AVATAR.maxFrames + 50, maxFrames: AVATAR.maxFrames },
    });
    const user = await t.context.db.prisma.user.findUniqueOrThrow({ where: { id: dev.userId } });
    expect(user.avatarFile).toBeNull();
  });

  it('refuses frames whose pixels add up to more than the decode limit', async () => {
    // 40 frames of 700x700: each side is allowed, together 19.6 million pixels.
    const res = await upload(await animatedGif(40, 700));
    expect(res.statusCode, res.body).toBe(400);
    expect(res.json()).toMatchObject({ details: { field: 'avatar', maxInputPixels: AVATAR.maxInputPixels } });
  });

  it('takes an animated GIF within both limits', async () => {
    const res = await upload(await animatedGif(20, 120));
    expect(res.statusCode, res.body).toBe(200);
  });
});
