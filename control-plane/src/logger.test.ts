import { describe, expect, it } from 'vitest';
import { capturedLogger } from './testing/captured-logs.ts';

describe('control-plane logger', () => {
  it("redacts a workload spec's secrets, alone and in a desired set", () => {
    const { logger, lines } = capturedLogger('info');
    const spec = {
      secretEnv: { TOKEN: 'secret-env-value' },
      files: [{ path: '/run/key', contentBase64: 'c2VjcmV0LWZpbGU=' }],
      registryAuth: { username: 'u', password: 'registry-password' },
    };
    logger.info({ spec, desired: { workloads: [spec] } }, 'sent');
    const text = JSON.stringify(lines);
    for (const secret of ['secret-env-value', 'c2VjcmV0LWZpbGU=', 'registry-password'])
      expect(text).not.toContain(secret);
    expect(lines[0]).toMatchObject({ spec: { secretEnv: '[redacted]', registryAuth: '[redacted]' } });
  });
});
