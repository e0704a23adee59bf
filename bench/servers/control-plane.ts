// The real control plane as `npm start` runs it (startServer, embedded PGlite in a temporary data
// directory, LOG_LEVEL=warn) — or, with BENCH_DATABASE_URL (a PostgreSQL server URL), on a fresh database
// made there for the run and dropped after, as production runs it — plus bench accounts: each connection of the load generator uses the key of
// its own Enterprise account, as many customers would, so the run measures admitted requests rather
// than one account's 429s once its 10,000 reads an hour are spent.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { createLogger, loadConfig, startServer } from '@anvil/control-plane';
import { displayPrefix, generateApiKey, hashApiKey, KEY_SCOPES, newId } from '@anvil/shared';
import pg from 'pg';
import { answerUsageRequests } from './usage-reply.ts';

const accounts = Number(process.env['BENCH_ACCOUNTS'] ?? '100');
const dataDir = mkdtempSync(join(tmpdir(), 'anvil-bench-'));
const serverUrl = process.env['BENCH_DATABASE_URL'];
const database = serverUrl ? `anvil_bench_${process.pid}` : null;
async function admin(statement: string): Promise<void> {
  const client = new pg.Client({ connectionString: serverUrl });
  await client.connect();
  try {
    await client.query(statement);
  } finally {
    await client.end();
  }
}
let databaseUrl: string | null = null;
if (serverUrl && database) {
  await admin(`CREATE DATABASE ${database}`);
  const url = new URL(serverUrl);
  url.pathname = `/${database}`;
  databaseUrl = url.toString();
}
const config = loadConfig({
  ...(databaseUrl ? { DATABASE_URL: databaseUrl } : {}),
  ANVIL_DATA_DIR: dataDir,
  PORT: '0',
  ANVIL_PROXY_PORT: '0',
  ANVIL_SSH_PORT: '0',
  ANVIL_HOST: '127.0.0.1',
  LOG_LEVEL: 'warn',
  ANVIL_BOOTSTRAP_API_KEY: generateApiKey('live'),
});
const server = await startServer(
  config,
  createLogger('warn'),
  new Writable({ write: (_c, _e, done) => done() }),
);

const prisma = server.context.db.prisma;
const keys: string[] = [];
for (let i = 0; i < accounts; i++) {
  const accountId = newId('acc');
  const userId = newId('usr');
  const value = generateApiKey('live');
  await prisma.account.create({ data: { id: accountId, name: `bench ${i}`, tier: 'enterprise' } });
  await prisma.user.create({
    data: { id: userId, accountId, email: `bench${i}@bench.local`, role: 'owner' },
  });
  await prisma.apiKey.create({
    data: {
      id: newId('key'),
      accountId,
      userId,
      name: 'bench',
      type: 'read_write',
      environment: 'live',
      permissions: ['read', 'write'],
      scopes: [...KEY_SCOPES],
      displayPrefix: displayPrefix(value),
      hash: hashApiKey(value),
    },
  });
  keys.push(value);
}

process.stdout.write(`BENCH_READY ${JSON.stringify({ url: server.url, path: '/v2/auth/verify', keys })}\n`);
answerUsageRequests();
process.once('SIGTERM', () => {
  server
    .close()
    .finally(() => rmSync(dataDir, { recursive: true, force: true }))
    .then(() => (database ? admin(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`) : undefined))
    .then(() => process.exit(0));
});
