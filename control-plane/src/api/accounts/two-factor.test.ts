import { createHmac } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { totpCode } from '../../auth/two-factor/totp.ts';
import { addMember, type TestMember } from '../../testing/accounts.ts';
import { createTestApp, ManualClock, type TestApp } from '../../testing/index.ts';

/** RFC 6238 TOTP written here from the RFC, independently of the code under test. */
function base32ToBytes(text: string): Buffer {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';
  const bits = [...text.replace(/=+$/, '')]
    .map((c) => alphabet.indexOf(c).toString(2).padStart(5, '0'))
    .join('');
  const bytes: number[] = [];
  for (let i = 0; i + 8 <= bits.length; i += 8) bytes.push(Number.parseInt(bits.slice(i, i + 8), 2));
  return Buffer.from(bytes);
}
function rfcTotp(key: Buffer, unixSeconds: number, digits = 6): string {
  const counter = Buffer.alloc(8);
  counter.writeBigUInt64BE(BigInt(Math.floor(unixSeconds / 30)));
  const hmac = createHmac('sha1', key).update(counter).digest();
  const offset = hmac[19]! & 0xf;
  const value =
    ((hmac[offset]! & 0x7f) << 24) | (hmac[offset + 1]! << 16) | (hmac[offset + 2]! << 8) | hmac[offset + 3]!;
  return String(value % 10 ** digits).padStart(digits, '0');
}

describe('two-factor authentication (TOTP) over HTTP', () => {
  let t: TestApp;
  let clock: ManualClock;
  let base: string;
  let admin: TestMember;
  let dev: TestMember;

  beforeEach(async () => {
    clock = new ManualClock(new Date('2026-06-01T10:00:00Z'));
    t = await createTestApp({ clock });
    base = await t.app.listen({ host: '127.0.0.1', port: 0 });
    admin = await addMember(t, { role: 'admin', name: 'Ada' });
    dev = await addMember(t, { role: 'developer', name: 'Dee' });
  });
  afterEach(async () => t.close());

  const http = async (
    method: string,
    path: string,
    options: { key?: string; body?: unknown; otp?: string } = {},
  ) => {
    const headers: Record<string, string> = { authorization: `Bearer ${options.key ?? t.ownerKey}` };
    if (options.body !== undefined) headers['content-type'] = 'application/json';
    if (options.otp !== undefined) headers['x-anvil-otp'] = options.otp;
    const res = await fetch(`${base}${path}`, {
      method,
      headers,
      ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) }),
    });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : null };
  };
  const now = () => clock.now().getTime() / 1000;
  const enrol = async (key?: string) => {
    const started = await http('POST', '/v2/accounts/security/two-factor/enrol', { key });
    expect(started.status).toBe(201);
    const secret = base32ToBytes(started.body.secret);
    const confirmed = await http('POST', '/v2/accounts/security/two-factor/confirm', {
      key,
      body: { code: rfcTotp(secret, now()) },
    });
    expect(confirmed.status).toBe(200);
    clock.advance(30_000); // the confirming code is used up; the next step gives a fresh one
    return { secret, backupCodes: confirmed.body.backupCodes as string[], uri: started.body.otpauthUri };
  };
  const newKey = { name: 'ci', permissions: ['read'], scopes: ['clusters'] };

  it('computes the RFC 6238 test vector (SHA-1, T=59 and T=1111111109)', () => {
    const secret = 'GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ'; // "12345678901234567890"
    expect(totpCode(secret, 1)).toBe('287082');
    expect(totpCode(secret, Math.floor(1111111109 / 30))).toBe('081804');
    expect(rfcTotp(Buffer.from('12345678901234567890'), 59, 8)).toBe('94287082');
  });

  it('turns on only after the caller enrolled with a first code, secret sealed and codes hashed', async () => {
    const early = await http('PUT', '/v2/accounts/settings/security', {
      body: { two_factor: { enabled: true } },
    });
    expect(early.status).toBe(403);
    expect(early.body.error).toBe('OTP_ENROLMENT_REQUIRED');

    const started = await http('POST', '/v2/accounts/security/two-factor/enrol');
    expect(started.body.otpauthUri).toMatch(
      /^otpauth:\/\/totp\/Anvil:admin%40localhost\?secret=[A-Z2-7]{32}&issuer=Anvil&algorithm=SHA1&digits=6&period=30$/,
    );
    const secret = base32ToBytes(started.body.secret);
    const wrong = await http('POST', '/v2/accounts/security/two-factor/confirm', {
      body: { code: rfcTotp(secret, now() + 3600) },
    });
    expect(wrong.status).toBe(401);
    expect(wrong.body.error).toBe('OTP_INVALID');
    expect((await http('GET', '/v2/accounts/security/two-factor')).body).toMatchObject({
      enrolled: false,
      pending: true,
    });
    const confirmed = await http('POST', '/v2/accounts/security/two-factor/confirm', {
      body: { code: rfcTotp(secret, now()) },
    });
    expect(confirmed.status).toBe(200);
    expect(confirmed.body.backupCodes).toHaveLength(10);

    const row = await t.context.db.prisma.twoFactorEnrolment.findUniqueOrThrow({
      where: { userId: t.userId },
    });
    expect(row.secret).not.toContain(started.body.secret);
    expect(row.secret.startsWith('v1.')).toBe(true);
    expect(JSON.stringify(row.backupCodeHashes)).not.toContain(
      confirmed.body.backupCodes[0].replace('-', ''),
    );

    // Enrolled: changing security settings is sensitive, so turning it on needs a code too.
    clock.advance(30_000);
    const noCode = await http('PUT', '/v2/accounts/settings/security', {
      body: { two_factor: { enabled: true } },
    });
    expect(noCode.status).toBe(401);
    expect(noCode.body.error).toBe('OTP_REQUIRED');
    const on = await http('PUT', '/v2/accounts/settings/security', {
      body: { two_factor: { enabled: true } },
      otp: rfcTotp(secret, now()),
    });
    expect(on.status).toBe(200);
    expect(on.body.security.two_factor).toMatchObject({ enabled: true, method: 'totp' });
    expect(on.body.security.two_factor.backup_codes).toEqual(Array(10).fill('********'));
    expect((await http('GET', '/v2/accounts/security/two-factor')).body).toMatchObject({
      enrolled: true,
      requiredByAccount: true,
      backupCodesRemaining: 10,
    });
  });

  it('asks sensitive operations for a current code, refusing replays; a backup code works once', async () => {
    const { secret, backupCodes } = await enrol();
    // Enrolled but the account does not require it yet: the enrolled member's own operations need a code.
    const noCode = await http('POST', '/v2/auth/api-keys', { body: newKey });
    expect(noCode.status).toBe(401);
    expect(noCode.body.error).toBe('OTP_REQUIRED');
    const bad = await http('POST', '/v2/auth/api-keys', { body: newKey, otp: '000000' });
    expect(bad.status).toBe(401);
    expect(bad.body.error).toBe('OTP_INVALID');
    const code = rfcTotp(secret, now());
    const created = await http('POST', '/v2/auth/api-keys', { body: newKey, otp: code });
    expect(created.status).toBe(201);
    const replay = await http('POST', `/v2/auth/api-keys/${created.body.key.id}/rotate`, {
      body: {},
      otp: code,
    });
    expect(replay.status).toBe(401);
    expect(replay.body.error).toBe('OTP_INVALID');
    // A code from the next step counts too (clocks a little apart), once.
    clock.advance(30_000);
    const rotated = await http('POST', `/v2/auth/api-keys/${created.body.key.id}/rotate`, {
      body: {},
      otp: rfcTotp(secret, now() + 30),
    });
    expect(rotated.status).toBe(200);

    // Reads are not sensitive.
    expect((await http('GET', '/v2/auth/api-keys')).status).toBe(200);

    // Member removal with a backup code, which then is spent.
    const backup = backupCodes[0]!;
    const removeWithout = await http('DELETE', `/v2/accounts/team/members/${dev.userId}`);
    expect(removeWithout.body.error).toBe('OTP_REQUIRED');
    expect((await t.context.db.prisma.user.findUniqueOrThrow({ where: { id: dev.userId } })).status).toBe(
      'active',
    );
    const removed = await http('DELETE', `/v2/accounts/team/members/${dev.userId}`, { otp: backup });
    expect(removed.status).toBe(200);
    const again = await http('PUT', `/v2/accounts/team/members/${admin.userId}`, {
      body: { role: 'viewer' },
      otp: backup.toUpperCase(),
    });
    expect(again.status).toBe(401);
    expect(again.body.error).toBe('OTP_INVALID');
    expect((await http('GET', '/v2/accounts/security/two-factor')).body.backupCodesRemaining).toBe(9);
    // Role change with the next code; a change of department alone is not sensitive.
    expect(
      (await http('PUT', `/v2/accounts/team/members/${admin.userId}`, { body: { department: 'ml' } })).status,
    ).toBe(200);
    clock.advance(60_000); // past the step the rotation used
    const demoted = await http('PUT', `/v2/accounts/team/members/${admin.userId}`, {
      body: { role: 'viewer' },
      otp: rfcTotp(secret, now()),
    });
    expect(demoted.status).toBe(200);
    expect(demoted.body.member.role).toBe('viewer');
    // Exporting settings with secrets is a secret reveal.
    const exported = await http('GET', '/v2/accounts/settings/export?include_secrets=true');
    expect(exported.body.error).toBe('OTP_REQUIRED');
  });

  it('once the account requires it, members who have not enrolled are refused sensitive operations', async () => {
    const { secret } = await enrol();
    const on = await http('PUT', '/v2/accounts/settings', {
      body: { security: { twoFactorAuth: true } },
      otp: rfcTotp(secret, now()),
    });
    expect(on.status).toBe(200);
    const refused = await http('POST', '/v2/auth/api-keys', { key: dev.key, body: newKey });
    expect(refused.status).toBe(403);
    expect(refused.body.error).toBe('OTP_ENROLMENT_REQUIRED');
    // Non-sensitive work goes on; enrolling is open to a member without an enrolment.
    expect((await http('GET', '/v2/auth/api-keys', { key: dev.key })).status).toBe(200);
    const devEnrolment = await enrol(dev.key);
    const created = await http('POST', '/v2/auth/api-keys', {
      key: dev.key,
      body: newKey,
      otp: rfcTotp(devEnrolment.secret, now()),
    });
    expect(created.status).toBe(201);
    // Re-enrolling, removing the enrolment and new backup codes need a code once enrolled.
    const reenrol = await http('POST', '/v2/accounts/security/two-factor/enrol', { key: dev.key });
    expect(reenrol.body.error).toBe('OTP_REQUIRED');
    const drop = await http('DELETE', '/v2/accounts/security/two-factor', {
      key: dev.key,
      otp: devEnrolment.backupCodes[3]!,
    });
    expect(drop.body).toEqual({ removed: true });
    expect(
      (await http('POST', '/v2/auth/api-keys', { key: dev.key, body: newKey, otp: '123456' })).body.error,
    ).toBe('OTP_ENROLMENT_REQUIRED');
  });

  it('refuses the sms method, which Anvil cannot deliver', async () => {
    const res = await http('PUT', '/v2/accounts/settings/security', {
      body: { two_factor: { method: 'sms' } },
    });
    expect(res.status).toBe(400);
    expect(res.body.error).toBe('NOT_SUPPORTED');
    expect(res.body.message).toContain('sms');
  });
});
