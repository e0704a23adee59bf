// The ceiling of any Node.js TLS endpoint on this machine, for bench/proxy.ts: a bare node:https server
// with the proxy's own certificate (ANVIL_BENCH_CEILING_CERT / _KEY, PEM files) serving the bodies of
// bench/fixtures/static-http from memory (/small.bin 1 KiB, /large.bin 1 MiB, keep-alive), with the
// proxy's TLS settings. No routing, authentication or upstream: what remains is TLS termination and
// node:http. Prints CEILING_READY {url} once it serves; answers 'cpu' over IPC with its CPU usage.
import { readFileSync } from 'node:fs';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { PROXY_TLS_SERVER_OPTIONS } from '../../control-plane/src/proxy/tls.ts';
import { answerUsageRequests } from './usage-reply.ts';

const cert = readFileSync(process.env['ANVIL_BENCH_CEILING_CERT']!, 'utf8');
const key = readFileSync(process.env['ANVIL_BENCH_CEILING_KEY']!, 'utf8');
const bodies = new Map([
  ['/small.bin', Buffer.alloc(1024, 'a')],
  ['/large.bin', Buffer.alloc(1024 * 1024, 'a')],
]);

const server = createServer({ ...PROXY_TLS_SERVER_OPTIONS, cert, key }, (req, res) => {
  const body = bodies.get(req.url ?? '');
  if (!body) {
    res.writeHead(404, { 'content-length': 0 });
    res.end();
    return;
  }
  res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': body.length });
  res.end(req.method === 'HEAD' ? undefined : body);
});
server.keepAliveTimeout = 72_000;
server.listen(0, '127.0.0.1', () => {
  const { port } = server.address() as AddressInfo;
  process.stdout.write(`CEILING_READY ${JSON.stringify({ url: `https://127.0.0.1:${port}` })}\n`);
});
answerUsageRequests();
process.on('SIGTERM', () => process.exit(0));
