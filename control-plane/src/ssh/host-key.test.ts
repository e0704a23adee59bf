import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import ssh2 from 'ssh2';
import { afterEach, describe, expect, it } from 'vitest';
import { generateHostKeyPair, loadHostKey } from './host-key.ts';

describe('SSH host key', () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });

  it('only ever returns a key that parses (the generator alone fails about once in 250)', () => {
    for (let i = 0; i < 2_000; i++) {
      expect(ssh2.utils.parseKey(generateHostKeyPair().private)).not.toBeInstanceOf(Error);
    }
  });

  it('is generated once: concurrent first starts agree on one key and leave no temporary file', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'anvil-host-key-'));
    dirs.push(dir);
    const keys = await Promise.all(Array.from({ length: 8 }, () => loadHostKey(dir)));
    expect(new Set(keys.map((k) => k.fingerprint)).size).toBe(1);
    expect((await loadHostKey(dir)).fingerprint).toBe(keys[0]!.fingerprint);
    expect(readdirSync(dir).sort()).toEqual(['ssh_host_ed25519_key', 'ssh_host_ed25519_key.pub']);
  });
});
