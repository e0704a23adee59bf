import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import sharp from 'sharp';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { addMember, call, type TestMember } from '../../testing/accounts.ts';
import { createTestApp, type TestApp } from '../../testing/index.ts';

/** A real image: a gradient-ish picture of the given size, encoded by sharp. */
async function image(
  format: 'png' | 'jpeg' | 'gif' | 'webp',
  width: number,
  height: number,
): Promise<Buffer> {
  const base = sharp({ create: { width, height, channels: 3, background: { r: 200, g: 60, b: 20 } } });
  return base[format]().toBuffer();
}

/** A PNG of random pixels: incompressible, so big. */
async function noisyPng(width: number, height: number): Promise<Buffer> {
  return sharp(randomBytes(width * height * 3), { raw: { width, height, channels: 3 } })
    .png({ compressionLevel: 0 })
    .toBuffer();
}

function multipart(field: string, filename: string, contentType: string, bytes: Buffer) {
  const boundary = `----anvil${randomBytes(8).toString('hex')}`;
  const head = Buffer.from(
    `--${boundary}\r\nContent-Disposition: form-data; name="${field}"; filename="${filename}"\r\n` +
      `Content-Type: ${contentType}\r\n\r\n`,
  );
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
  return {
    payload: Buffer.concat([head, bytes, tail]),
    contentType: `multipart/form-data; boundary=${boundary}`,
  };
}

describe('profile', () => {
  let t: TestApp;
  let dataDir: string;
  let dev: TestMember;

  beforeEach(async () => {
    dataDir = mkdtempSync(join(tmpdir(), 'anvil-profile-'));
    t = await createTestApp({
      env: { ANVIL_DATA_DIR: dataDir, ANVIL_PUBLIC_URL: 'https://anvil.example.com' },
    });
    dev = await addMember(t, { role: 'developer', email: 'dev@example.com', name: 'Dev' });
  });
  afterEach(async () => {
    await t.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  const put = (payload: Record<string, unknown>, key?: TestMember) =>
    call(t, { method: 'PUT', url: '/v2/accounts/profile', payload, ...(key ? { key } : {}) });

  const upload = (bytes: Buffer, filename = 'me.png', contentType = 'image/png', field = 'avatar') => {
    const body = multipart(field, filename, contentType, bytes);
    return t.app.inject({
      method: 'POST',
      url: '/v2/accounts/profile/avatar',
      headers: { authorization: `Bearer ${dev.key}`, 'content-type': body.contentType },
      payload: body.payload,
    });
  };

  it('reads the profile with its preferences', async () => {
    const res = await call(t, { url: '/v2/accounts/profile', key: dev });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({
      id: dev.userId,
      email: 'dev@example.com',
      name: 'Dev',
      avatar: null,
      bio: null,
      role: 'developer',
      verified: false,
      plan: 'enterprise',
      accountId: t.accountId,
      preferences: {
        timezone: 'UTC',
        language: 'en',
        theme: 'light',
        emailNotifications: true,
        slackNotifications: false,
      },
    });
  });

  it('updates every field within the bounds of the spec', async () => {
    const res = await put(
      {
        name: 'Grace Hopper',
        bio: 'b'.repeat(500),
        location: 'l'.repeat(100),
        website: 'https://grace.example.org/about',
        twitter: '@grace_h',
        github: 'grace-hopper',
        username: 'grace.h',
      },
      dev,
    );
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({
      name: 'Grace Hopper',
      bio: 'b'.repeat(500),
      location: 'l'.repeat(100),
      website: 'https://grace.example.org/about',
      twitter: 'grace_h',
      github: 'grace-hopper',
      username: 'grace.h',
    });
    const cleared = await put({ bio: null, website: null }, dev);
    expect(cleared.json()).toMatchObject({ bio: null, website: null, name: 'Grace Hopper' });
  });

  it("changes the e-mail (short form), unverifying it, and refuses a teammate's address", async () => {
    await t.context.db.prisma.user.update({ where: { id: dev.userId }, data: { verified: true } });
    const res = await put({ name: 'D', email: 'new@example.com' }, dev);
    expect(res.json()).toMatchObject({ name: 'D', email: 'new@example.com', verified: false });
    await addMember(t, { role: 'viewer', email: 'taken@example.com' });
    const taken = await put({ email: 'TAKEN@example.com' }, dev);
    expect(taken.statusCode).toBe(400);
    expect(taken.json()).toMatchObject({ error: 'VALIDATION_ERROR', details: { field: 'email' } });
  });

  it.each([
    [{ name: '' }, 'name'],
    [{ name: '   ' }, 'name'],
    [{ name: 'n'.repeat(101) }, 'name'],
    [{ bio: 'b'.repeat(501) }, 'bio'],
    [{ location: 'l'.repeat(101) }, 'location'],
    [{ website: 'ftp://files.example.com' }, 'website'],
    [{ website: 'not a url' }, 'website'],
    [{ twitter: 'has space' }, 'twitter'],
    [{ twitter: 'x'.repeat(17) }, 'twitter'],
    [{ github: '-leading-hyphen' }, 'github'],
    [{ github: 'double--hyphen' }, 'github'],
    [{ username: 'a' }, 'username'],
    [{ avatar: 'https://x' }, 'avatar'],
  ])('refuses %j with VALIDATION_ERROR on %s, changing nothing', async (payload, field) => {
    // Every request moves lastActiveAt (member activity); nothing else may change.
    const { lastActiveAt: _a, ...before } = await t.context.db.prisma.user.findUniqueOrThrow({
      where: { id: dev.userId },
    });
    const res = await put(payload, dev);
    expect(res.statusCode).toBe(400);
    expect(res.json()).toMatchObject({
      error: 'VALIDATION_ERROR',
      code: 400,
      details: { field, reason: expect.any(String) },
    });
    const { lastActiveAt: _b, ...after } = await t.context.db.prisma.user.findUniqueOrThrow({
      where: { id: dev.userId },
    });
    expect(after).toEqual(before);
  });

  it('refuses a malformed e-mail with INVALID_EMAIL', async () => {
    const res = await put({ email: 'dev@' }, dev);
    expect(res.statusCode).toBe(400);
    expect(res.json()).toMatchObject({ error: 'INVALID_EMAIL', details: { field: 'email', value: 'dev@' } });
  });

  it('updates preferences, checking time zones against the IANA database', async () => {
    const res = await call(t, {
      method: 'PUT',
      url: '/v2/accounts/profile/preferences',
      key: dev,
      payload: {
        timezone: 'Asia/Kolkata',
        language: 'de',
        theme: 'dark',
        emailNotifications: false,
        slackNotifications: true,
      },
    });
    expect(res.statusCode).toBe(200);
    expect(res.json().preferences).toEqual({
      timezone: 'Asia/Kolkata',
      language: 'de',
      theme: 'dark',
      emailNotifications: false,
      slackNotifications: true,
    });
    const partial = await call(t, {
      method: 'PUT',
      url: '/v2/accounts/profile/preferences',
      key: dev,
      payload: { timezone: 'utc' },
    });
    expect(partial.json().preferences).toMatchObject({ timezone: 'UTC', language: 'de' });
    expect((await call(t, { url: '/v2/accounts/profile', key: dev })).json().preferences.theme).toBe('dark');
    for (const [payload, field] of [
      [{ timezone: 'Mars/Olympus_Mons' }, 'timezone'],
      [{ timezone: '+02:00' }, 'timezone'],
      [{ theme: 'auto' }, 'theme'],
      [{ language: 'xx' }, 'language'],
      [{ emailNotifications: 'yes' }, 'emailNotifications'],
    ] as const) {
      const bad = await call(t, {
        method: 'PUT',
        url: '/v2/accounts/profile/preferences',
        key: dev,
        payload,
      });
      expect(bad.statusCode, JSON.stringify(payload)).toBe(400);
      expect(bad.json().details.field).toBe(field);
    }
  });

  describe('avatar', () => {
    it('crops a PNG to a square, stores it, and serves it at the returned URL', async () => {
      const res = await upload(await image('png', 300, 200));
      expect(res.statusCode, res.body).toBe(200);
      const body = res.json();
      expect(body).toMatchObject({ width: 200, height: 200, type: 'image/png' });
      expect(body.avatar).toMatch(
        new RegExp(`^https://anvil\\.example\\.com/avatars/${dev.userId}-[0-9a-f]{16}\\.png$`),
      );
      const path = new URL(body.avatar).pathname;
      const served = await t.app.inject({ url: path });
      expect(served.statusCode).toBe(200);
      expect(served.headers['content-type']).toBe('image/png');
      const meta = await sharp(served.rawPayload).metadata();
      expect([meta.format, meta.width, meta.height]).toEqual(['png', 200, 200]);
      expect((await call(t, { url: '/v2/accounts/profile', key: dev })).json().avatar).toBe(body.avatar);
      const team = (await call(t, { url: '/v2/accounts/team/members' })).json();
      expect(team.members.find((m: { id: string }) => m.id === dev.userId).avatar).toBe(body.avatar);
    });

    it('accepts JPEG and GIF, decided by the bytes and not the name, and replaces the old file', async () => {
      const jpeg = await upload(await image('jpeg', 150, 400), 'portrait.gif', 'image/gif');
      expect(jpeg.statusCode, jpeg.body).toBe(200);
      expect(jpeg.json()).toMatchObject({ type: 'image/jpeg', width: 150, height: 150 });
      expect(jpeg.json().avatar).toMatch(/\.jpg$/);
      const gif = await upload(await image('gif', 120, 2048), 'x.bin', 'application/octet-stream');
      expect(gif.statusCode, gif.body).toBe(200);
      expect(gif.json()).toMatchObject({ type: 'image/gif', width: 120, height: 120 });
      const served = await t.app.inject({ url: new URL(gif.json().avatar).pathname });
      expect((await sharp(served.rawPayload).metadata()).format).toBe('gif');
      expect(readdirSync(join(dataDir, 'avatars'))).toEqual([
        new URL(gif.json().avatar).pathname.slice('/avatars/'.length),
      ]);
    });

    it('refuses other types by their bytes with 415 INVALID_FILE_TYPE', async () => {
      const webp = await upload(await image('webp', 200, 200), 'avatar.png', 'image/png');
      expect(webp.statusCode).toBe(415);
      expect(webp.json()).toMatchObject({
        error: 'INVALID_FILE_TYPE',
        code: 415,
        details: {
          allowedTypes: ['image/jpeg', 'image/png', 'image/gif'],
          receivedType: 'image/webp',
          declaredType: 'image/png',
        },
      });
      const text = await upload(Buffer.from('hello, I am not a picture'), 'avatar.jpg', 'image/jpeg');
      expect(text.statusCode).toBe(415);
      expect(text.json().details.receivedType).toBe('application/octet-stream');
      expect(existsSync(join(dataDir, 'avatars'))).toBe(false);
    });

    it('refuses files over 5 MB with 413 FILE_TOO_LARGE and the sizes', async () => {
      const big = await noisyPng(1500, 1300);
      expect(big.length).toBeGreaterThan(5 * 1024 * 1024);
      const res = await upload(big);
      expect(res.statusCode).toBe(413);
      expect(res.json()).toMatchObject({
        error: 'FILE_TOO_LARGE',
        details: { maxSize: 5 * 1024 * 1024, receivedSize: big.length },
      });
    });

    it.each([
      ['png', 99, 300],
      ['jpeg', 300, 99],
      ['png', 2049, 300],
      ['gif', 300, 2049],
    ] as const)('refuses a %s of %ix%i px with 400', async (format, width, height) => {
      const res = await upload(await image(format, width, height));
      expect(res.statusCode).toBe(400);
      expect(res.json()).toMatchObject({
        error: 'VALIDATION_ERROR',
        details: { field: 'avatar', width, height, minSize: 100, maxSize: 2048 },
      });
      const user = await t.context.db.prisma.user.findUniqueOrThrow({ where: { id: dev.userId } });
      expect(user.avatarFile).toBeNull();
    });

    it('accepts the 100 px and 2048 px bounds', async () => {
      expect((await upload(await image('png', 100, 100))).json()).toMatchObject({ width: 100 });
      expect((await upload(await image('jpeg', 2048, 2048))).json()).toMatchObject({ width: 2048 });
    });

    it('refuses a broken image, a missing field and a non-multipart body', async () => {
      const png = await image('png', 200, 200);
      const broken = await upload(png.subarray(0, 60));
      expect(broken.statusCode).toBe(400);
      expect(broken.json().details.field).toBe('avatar');
      const wrongField = await upload(png, 'me.png', 'image/png', 'picture');
      expect(wrongField.statusCode).toBe(400);
      expect(wrongField.json().details).toMatchObject({ field: 'avatar', reason: 'is required' });
      const json = await call(t, {
        method: 'POST',
        url: '/v2/accounts/profile/avatar',
        key: dev,
        payload: { avatar: 'x' },
      });
      expect(json.statusCode).toBe(415);
      expect(json.json().error).toBe('UNSUPPORTED_MEDIA_TYPE');
      expect((await t.app.inject({ url: '/avatars/../../etc/passwd' })).statusCode).toBe(404);
      expect((await t.app.inject({ url: `/avatars/${dev.userId}-0000000000000000.png` })).statusCode).toBe(
        404,
      );
    });
  });
});
