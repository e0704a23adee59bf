import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { createLogger } from './logger.ts';

describe('agent logger', () => {
  it("redacts a workload spec's secrets, alone and in a desired set", () => {
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk, _encoding, done) {
        lines.push(String(chunk));
        done();
      },
    });
    const spec = {
      secretEnv: { TOKEN: 'secret-env-value' },
      files: [{ path: '/run/key', contentBase64: 'c2VjcmV0LWZpbGU=' }],
      registryAuth: { username: 'u', password: 'registry-password' },
    };
    createLogger('info', sink).info({ spec, desired: { workloads: [spec] } }, 'received');
    const text = lines.join('');
    for (const secret of ['secret-env-value', 'c2VjcmV0LWZpbGU=', 'registry-password'])
      expect(text).not.toContain(secret);
    expect(JSON.parse(lines[0]!)).toMatchObject({
      spec: { secretEnv: '[redacted]', registryAuth: '[redacted]' },
    });
  });
});
