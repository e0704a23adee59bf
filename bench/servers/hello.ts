// The baseline: a bare fastify hello-world route, no logging, nothing else.
import Fastify from 'fastify';
import { answerUsageRequests } from './usage-reply.ts';

const app = Fastify({ logger: false });
app.get('/', async () => ({ hello: 'world' }));
const url = await app.listen({ port: 0, host: '127.0.0.1' });
process.stdout.write(`BENCH_READY ${JSON.stringify({ url, path: '/', keys: [] })}\n`);
answerUsageRequests();
process.once('SIGTERM', () => {
  app.close().then(() => process.exit(0));
});
