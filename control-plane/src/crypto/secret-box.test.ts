import { randomBytes } from 'node:crypto';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { loadSecretBox, parseSecretKey, SecretBox } from './secret-box.ts';

describe('secret box', () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });

  it('derives MACs that verify under the current or a previous key, and only for their message', () => {
    const oldKey = randomBytes(32);
    const before = new SecretBox(oldKey);
    const rotated = new SecretBox(randomBytes(32), [oldKey]);
    const mac = before.mac('endpoint-worker-token:wl_1');
    expect(before.verifyMac('endpoint-worker-token:wl_1', mac)).toBe(true);
    expect(before.verifyMac('endpoint-worker-token:wl_2', mac)).toBe(false);
    expect(rotated.verifyMac('endpoint-worker-token:wl_1', mac)).toBe(true);
    expect(new SecretBox(randomBytes(32)).verifyMac('endpoint-worker-token:wl_1', mac)).toBe(false);
    expect(rotated.mac('endpoint-worker-token:wl_1')).not.toBe(mac);
  });

  it('seals with AES-256-GCM and opens only in the same context', () => {
    const box = new SecretBox(randomBytes(32));
    const sealed = box.seal('whsec_value', 'acc_1:notifications.webhook.secret');
    expect(SecretBox.isSealed(sealed)).toBe(true);
    expect(sealed).not.toContain('whsec_value');
    expect(sealed.split('.')[1]).toBe(box.keyId);
    expect(box.open(sealed, 'acc_1:notifications.webhook.secret')).toBe('whsec_value');
    // A fresh nonce every time.
    expect(box.seal('whsec_value', 'c')).not.toBe(box.seal('whsec_value', 'c'));
    expect(() => box.open(sealed, 'acc_2:notifications.webhook.secret')).toThrow(/failed authentication/);
    const parts = sealed.split('.');
    const body = Buffer.from(parts[3]!, 'base64url');
    body[0] = body[0]! ^ 1;
    parts[3] = body.toString('base64url');
    expect(() => box.open(parts.join('.'), 'acc_1:notifications.webhook.secret')).toThrow(
      /failed authentication/,
    );
    expect(box.open(box.seal('', 'c'), 'c')).toBe('');
  });

  it('opens values of a previous key, tells they need re-sealing, and refuses unknown keys', () => {
    const oldKey = randomBytes(32);
    const old = new SecretBox(oldKey);
    const sealed = old.seal('token', 'ctx');
    const rotated = new SecretBox(randomBytes(32), [oldKey]);
    expect(rotated.open(sealed, 'ctx')).toBe('token');
    expect(rotated.needsReseal(sealed)).toBe(true);
    expect(rotated.needsReseal(rotated.seal('token', 'ctx'))).toBe(false);
    expect(() => new SecretBox(randomBytes(32)).open(sealed, 'ctx')).toThrow(/ANVIL_SECRET_KEY_PREVIOUS/);
  });

  it('parses 32-byte keys written in hex or base64 only', () => {
    const key = randomBytes(32);
    expect(parseSecretKey(key.toString('hex'))).toEqual(key);
    expect(parseSecretKey(key.toString('base64'))).toEqual(key);
    expect(parseSecretKey(key.toString('base64url'))).toEqual(key);
    expect(parseSecretKey(randomBytes(16).toString('hex'))).toBeNull();
    expect(parseSecretKey('password')).toBeNull();
  });

  it('generates a development key file with mode 0600 once, and reuses it', () => {
    const dir = mkdtempSync(join(tmpdir(), 'anvil-secret-'));
    dirs.push(dir);
    const first = loadSecretBox({ secretKey: null, previousSecretKeys: [], dataDir: join(dir, 'data') });
    expect(first.source).toBe('generated');
    expect(first.path).toBe(join(dir, 'data', 'secret.key'));
    expect(statSync(first.path!).mode & 0o777).toBe(0o600);
    expect(parseSecretKey(readFileSync(first.path!, 'utf8'))).not.toBeNull();
    const second = loadSecretBox({ secretKey: null, previousSecretKeys: [], dataDir: join(dir, 'data') });
    expect(second.source).toBe('file');
    expect(second.box.keyId).toBe(first.box.keyId);
    const configured = loadSecretBox({
      secretKey: randomBytes(32),
      previousSecretKeys: [],
      dataDir: join(dir, 'data'),
    });
    expect(configured.source).toBe('config');
    expect(configured.box.keyId).not.toBe(first.box.keyId);
  });

  it.each([
    [0o600, true],
    [0o400, true],
    [0o640, false],
    [0o604, false],
    [0o644, false],
    [0o620, false],
    [0o666, false],
    [0o700, true],
    [0o710, false],
  ])('a secret.key of mode %o is %s accepted (group/world access refuses the start)', (mode, accepted) => {
    const dir = mkdtempSync(join(tmpdir(), 'anvil-secret-'));
    dirs.push(dir);
    const dataDir = join(dir, 'data');
    mkdirSync(dataDir);
    const path = join(dataDir, 'secret.key');
    writeFileSync(path, `${randomBytes(32).toString('hex')}\n`);
    chmodSync(path, mode);
    const load = () => loadSecretBox({ secretKey: null, previousSecretKeys: [], dataDir });
    if (accepted) expect(load().source).toBe('file');
    else expect(load).toThrow(new RegExp(`mode 0${mode.toString(8)}.*chmod 600 ${path}`));
  });

  it('creates the key file 0600 whatever the umask', () => {
    const dir = mkdtempSync(join(tmpdir(), 'anvil-secret-'));
    dirs.push(dir);
    const previous = process.umask(0);
    try {
      const loaded = loadSecretBox({ secretKey: null, previousSecretKeys: [], dataDir: join(dir, 'data') });
      expect(statSync(loaded.path!).mode & 0o777).toBe(0o600);
    } finally {
      process.umask(previous);
    }
  });
});
