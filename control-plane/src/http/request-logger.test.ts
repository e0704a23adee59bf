import { Writable } from 'node:stream';
import type { FastifyBaseLogger } from 'fastify';
import pino from 'pino';
import { describe, expect, it, vi } from 'vitest';
import { capturedLogger } from '../testing/captured-logs.ts';
import { DeferredRequestLogger, deferredChildLogger } from './request-logger.ts';

function capture(level: 'warn' | 'info') {
  const { logger, lines } = capturedLogger(level);
  return { logger: logger as unknown as FastifyBaseLogger, lines };
}

describe('deferred request logger', () => {
  it('makes no child for a request that logs nothing at an enabled level', () => {
    const { logger, lines } = capture('warn');
    const child = vi.spyOn(logger, 'child');
    const log = deferredChildLogger(logger, { request_id: 'req_1' }, {});
    log.info('below the level');
    log.debug({ some: 'thing' }, 'below the level');
    expect(child).not.toHaveBeenCalled();
    expect(lines).toEqual([]);
    expect(log.level).toBe('warn');
  });

  it('writes the same lines as an eager child, request id and redaction included', () => {
    const { logger, lines } = capture('info');
    const log = deferredChildLogger(logger, { request_id: 'req_2' }, {});
    log.warn({ req: { headers: { authorization: 'Bearer anv_live_secret' } } }, 'first');
    log.info('second');
    log.error(new Error('boom'));
    expect(lines.map((l) => [l['request_id'], l['msg']])).toEqual([
      ['req_2', 'first'],
      ['req_2', 'second'],
      ['req_2', 'boom'],
    ]);
    expect(lines[0]).toMatchObject({ level: 40, req: { headers: { authorization: '[redacted]' } } });
    expect(lines[2]).toMatchObject({ level: 50, err: { message: 'boom' } });
  });

  it('builds the child once, at the first line written', () => {
    const { logger } = capture('info');
    const child = vi.spyOn(logger, 'child');
    const log = deferredChildLogger(logger, { request_id: 'req_3' }, {});
    log.info('one');
    log.info('two');
    expect(child).toHaveBeenCalledTimes(1);
    expect(child).toHaveBeenCalledWith({ request_id: 'req_3' }, {});
  });

  it('applies a level set on the request logger to that request only', () => {
    const { logger, lines } = capture('warn');
    const log = deferredChildLogger(logger, { request_id: 'req_4' }, {});
    log.level = 'debug';
    log.debug('now written');
    deferredChildLogger(logger, { request_id: 'req_5' }, {}).debug('still below the level');
    expect(lines.map((l) => l['request_id'])).toEqual(['req_4']);
    expect(logger.level).toBe('warn');
  });

  it('builds the child at once for a route with its own log level', () => {
    const { logger, lines } = capture('warn');
    const log = deferredChildLogger(logger, { request_id: 'req_6' }, { level: 'info' });
    expect(log).not.toBeInstanceOf(DeferredRequestLogger);
    log.info('route level');
    expect(lines).toHaveLength(1);
  });

  it('passes every line on for a logger that cannot say which levels it writes', () => {
    const written: string[] = [];
    const plain = pino(
      { level: 'info' },
      new Writable({
        write(chunk, _encoding, done) {
          written.push(String(chunk));
          done();
        },
      }),
    );
    const bare = { ...plain, child: plain.child.bind(plain), isLevelEnabled: undefined, level: 'info' };
    const log = deferredChildLogger(bare as unknown as FastifyBaseLogger, { request_id: 'req_7' }, {});
    log.info('passed on');
    expect(written.join('')).toContain('"request_id":"req_7"');
  });
});
