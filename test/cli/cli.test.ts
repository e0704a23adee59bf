import { createHash } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApiClient } from '../../cli/src/api.ts';
import { COMMANDS } from '../../cli/src/commands/index.ts';
import { DatasetUploader, progressBar, stateDir } from '../../cli/src/upload.ts';
import { addMember } from '../../control-plane/src/testing/accounts.ts';
import { createTestApp, freePort, type TestApp } from '../../control-plane/src/testing/index.ts';
import { builtCli, cliInProcess, cliProcess, runProcess } from './run-cli.ts';

const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');

/**
 * The CLI's own behaviour against the real control plane over loopback: login and profiles, exit codes,
 * tables and JSON, help and completion. Commands run in this process (fast) except where the built bundle
 * must run as users run it.
 */
describe('anvil CLI: profiles, exit codes, output', () => {
  let t: TestApp;
  let url: string;
  let dir: string;
  let home: string;
  let env: Record<string, string>;
  let bundle: string;
  let bin: string;

  const anvil = (argv: string[], extra: Record<string, string> = {}, stdin = '') =>
    cliInProcess(argv, { ...env, ...extra }, stdin);
  const configFile = () => join(home, '.config', 'anvil', 'config.json');

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'anvil-cli-'));
    home = join(dir, 'home');
    env = { HOME: home, PATH: process.env['PATH'] ?? '' };
    t = await createTestApp({ env: { ANVIL_DATA_DIR: join(dir, 'data') } });
    url = await t.app.listen({ host: '127.0.0.1', port: 0 });
    ({ bundle, bin } = await builtCli(dir));
  }, 120_000);

  afterAll(async () => {
    await t?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('logs in: checks the key with /v2/auth/verify and stores it with mode 0600; a bad key stores nothing (exit 3)', async () => {
    const bad = await anvil(['login', '--url', url, '--key', 'anv_live_not_a_key']);
    expect(bad.code).toBe(3);
    expect(bad.stderr).toMatch(/^anvil: .+ \(UNAUTHORIZED, HTTP 401, request [\w-]+\)\n$/);
    expect(bad.stderr).not.toMatch(/\n\s+at /);
    expect(() => statSync(configFile())).toThrow();

    const good = await anvil(['login', '--url', `${url}/`, '--key', '-', '--json'], {}, `${t.ownerKey}\n`);
    expect(good.code, good.stderr).toBe(0);
    const answer = JSON.parse(good.stdout);
    expect(answer).toMatchObject({ profile: 'default', url, valid: true, account_id: t.accountId });
    expect(statSync(configFile()).mode & 0o777).toBe(0o600);
    const stored = JSON.parse(readFileSync(configFile(), 'utf8'));
    expect(stored).toEqual({
      current: 'default',
      profiles: { default: { url, key: t.ownerKey, accountId: t.accountId, keyId: answer.key_id } },
    });
    const who = await anvil(['whoami']);
    expect(who.code).toBe(0);
    expect(who.stdout).toMatch(/^KEY\s+ACCOUNT\s+PERMISSIONS\s+SCOPES\s+EXPIRES\n/);
    expect(who.stdout).toContain(t.accountId);
  });

  it('keeps named profiles: --profile and ANVIL_PROFILE pick one, ANVIL_URL/ANVIL_API_KEY override, logout forgets', async () => {
    const viewer = await addMember(t, { role: 'viewer', keyPermissions: ['read'] });
    expect((await anvil(['login', '--url', url, '--key', viewer.key, '--profile', 'ro'])).code).toBe(0);
    const list = await anvil(['profiles', 'list']);
    expect(list.stdout).toMatch(/^\s+NAME\s+URL\s+KEY\s+ACCOUNT\n/);
    expect(list.stdout).toMatch(/\n {4}default /);
    expect(list.stdout).toMatch(/\n\* {3}ro /);
    expect(list.stdout).not.toContain(viewer.key);

    // The viewer's read-only key may not create keys: 403, exit 4. The owner's profile may.
    const refused = await anvil(['keys', 'create', '--name', 'x']);
    expect(refused.code).toBe(4);
    expect(refused.stderr).toMatch(/HTTP 403, request /);
    const created = await anvil(['keys', 'create', '--name', 'ci', '--permission', 'read', '--json'], {
      ANVIL_PROFILE: 'default',
    });
    expect(created.code, created.stderr).toBe(0);
    const key = JSON.parse(created.stdout);
    expect(key.value).toMatch(/^anv_/);

    const table = await anvil(['keys', 'list', '--profile', 'default']);
    expect(table.stdout.split('\n')[0]).toMatch(
      /^ID\s+NAME\s+STATUS\s+PERMISSIONS\s+PREFIX\s+LAST USED\s+EXPIRES$/,
    );
    expect(table.stdout).toMatch(new RegExp(`\\n${key.key.id}\\s+ci\\s+active\\s+read\\s`));
    // ANVIL_API_KEY overrides the profile's key: the new read-only key may list but not revoke.
    const asCi = await anvil(['keys', 'revoke', key.key.id], { ANVIL_API_KEY: key.value });
    expect(asCi.code).toBe(4);
    const revoked = await anvil(['keys', 'revoke', key.key.id, '-p', 'default']);
    expect(revoked.code, revoked.stderr).toBe(0);
    expect((await anvil(['whoami'], { ANVIL_API_KEY: key.value })).code).toBe(3);

    expect((await anvil(['profiles', 'use', 'default'])).code).toBe(0);
    expect((await anvil(['logout', '--profile', 'ro'])).code).toBe(0);
    expect(Object.keys(JSON.parse(readFileSync(configFile(), 'utf8')).profiles)).toEqual(['default']);
    expect((await anvil(['whoami', '--profile', 'ro'])).code).toBe(3);
  });

  it('exits with the documented code for each kind of failure, on one line without a stack trace', async () => {
    const cases: Array<[string[], number, RegExp, Record<string, string>?]> = [
      [['clusters', 'get', 'cluster_nope'], 5, /\(CLUSTER_NOT_FOUND, HTTP 404, request [\w-]+\)/],
      [['clusters', 'get', 'no-such-name'], 5, /no cluster named "no-such-name"/],
      [['keys', 'create', '--name', 'x', '--permission', 'fly'], 6, /HTTP 400, request /],
      [['clusters', 'frobnicate'], 2, /unknown command "clusters frobnicate"/],
      [['clusters', 'get'], 2, /takes <cluster>/],
      [['clusters', 'list', '--colour'], 2, /Unknown option '--colour'/],
      [['clusters', 'delete', 'x'], 2, /add --yes/],
      [['whoami'], 3, /not logged in/, { HOME: join(dir, 'nobody') }],
      [
        ['whoami'],
        8,
        /cannot reach http:\/\/127\.0\.0\.1:\d+: ECONNREFUSED/,
        { ANVIL_URL: `http://127.0.0.1:${await freePort()}` },
      ],
    ];
    for (const [argv, code, message, extra] of cases) {
      const run = await anvil(argv, extra);
      expect(run.code, `${argv.join(' ')}: ${run.stderr}`).toBe(code);
      expect(run.stderr).toMatch(message);
      expect(run.stderr.trimEnd().split('\n')).toHaveLength(1);
      expect(run.stdout).toBe('');
    }
  });

  it('prints tables by default and the API answer with --json', async () => {
    const created = await t.app.inject({
      method: 'POST',
      url: '/v2/training/datasets',
      headers: t.auth(),
      payload: { name: 'table-test', type: 'text', format: 'jsonl' },
    });
    expect(created.statusCode, created.body).toBe(201);
    const text = await anvil(['datasets', 'list']);
    expect(text.stdout).toMatch(/^ID\s+NAME\s+STATUS\s+FORMAT\s+SIZE\s+EXAMPLES\s+AGE\n/);
    expect(text.stdout).toMatch(/\nds_\w+\s+table-test\s+uploading\s+jsonl\s+-\s+-\s+\d+s\n/);
    const json = JSON.parse((await anvil(['datasets', 'list', '--json'])).stdout);
    expect(json).toEqual([expect.objectContaining({ name: 'table-test', status: 'uploading' })]);
    expect(JSON.parse((await anvil(['clusters', 'list', '--json'])).stdout)).toEqual([]);
  });

  it('resumes an interrupted multipart upload when the same command runs again', async () => {
    const file = join(dir, 'resume.jsonl');
    const line = (i: number) => `${JSON.stringify({ prompt: `q${i}`, completion: 'y'.repeat(200) })}\n`;
    writeFileSync(file, Array.from({ length: 26_000 }, (_, i) => line(i)).join(''));
    const bytes = readFileSync(file);
    const created = await t.app.inject({
      method: 'POST',
      url: '/v2/training/datasets',
      headers: t.auth(),
      payload: { name: 'resume', type: 'text', format: 'jsonl' },
    });
    const datasetId = created.json().id as string;
    // The first run loses its connection before the second part (its fetch fails as a dropped one does).
    const runEnv = { ...env, ANVIL_URL: url, ANVIL_API_KEY: t.ownerKey };
    const dropping: typeof fetch = (input, init) =>
      String(input).includes('/parts/2') ? Promise.reject(new TypeError('fetch failed')) : fetch(input, init);
    const api = new ApiClient(url, t.ownerKey, dropping);
    const first = new DatasetUploader(api, runEnv, { start() {}, add() {}, done() {} }, () => {});
    const target = { datasetId, uploadPath: '/v2/training/uploads' };
    const plan = { file, size: bytes.length, multipartAbove: 1024 * 1024, partSize: 5 * 1024 * 1024 };
    await expect(first.upload(target, plan)).rejects.toThrow(/cannot reach/);
    expect(readdirSync(stateDir(runEnv))).toHaveLength(1);
    expect(statSync(join(stateDir(runEnv), readdirSync(stateDir(runEnv))[0]!)).mode & 0o777).toBe(0o600);

    const again = await anvil(
      ['datasets', 'upload', file, '--multipart-above', '1MiB', '--wait', '--json'],
      runEnv,
    );
    expect(again.code, again.stderr).toBe(0);
    expect(again.stderr).toMatch(/resuming upload dsup_\w+: 1 of 2 parts already uploaded/);
    expect(JSON.parse(again.stdout)).toMatchObject({
      id: datasetId,
      status: 'ready',
      checksum: sha256(bytes),
    });
    expect(readdirSync(stateDir(runEnv))).toEqual([]);
  });

  it('draws a progress bar on a terminal only', () => {
    let drawn = '';
    const bar = progressBar({ isTTY: true, write: (text: string) => (drawn += text) }, 'train.jsonl');
    bar.start(4 * 1024 * 1024, 1024 * 1024);
    bar.add(3 * 1024 * 1024);
    bar.done();
    expect(drawn).toMatch(/^\rtrain\.jsonl \[#{8}\.{22}\] {2}25% 1\.0\/4\.0 MiB/);
    expect(drawn).toMatch(/\rtrain\.jsonl \[#{30}\] 100% 4\.0\/4\.0 MiB [\d.]+ MiB\/s \n$/);
    let piped = '';
    const quiet = progressBar({ write: (text: string) => (piped += text) }, 'x');
    quiet.start(10, 0);
    quiet.add(10);
    quiet.done();
    expect(piped).toBe('');
  });

  it('serves operators: hosts and join tokens; other members get exit 4; training jobs list and refusals', async () => {
    const token = await anvil(['join-token', '--uses', '2', '--json'], { ANVIL_PROFILE: 'default' });
    expect(token.code, token.stderr).toBe(0);
    const created = JSON.parse(token.stdout);
    expect(created.value).toMatch(/^anvjt_/);
    expect(created.token.maxUses).toBe(2);
    const human = await anvil(['join-token']);
    expect(human.stdout).toMatch(
      /^Join token \S+ \(shown once\):\n {2}anvjt_\S+\nOn the GPU server:\n {2}.*--join-token anvjt_/,
    );
    expect((await anvil(['hosts', 'list'])).stdout).toMatch(
      /^ID\s+NAME\s+STATE\s+CONNECTED\s+GPUS\s+MEMORY\s+AGENT\s+HEARTBEAT\n$/,
    );
    const developer = await addMember(t, { role: 'developer' });
    const refused = await anvil(['hosts', 'list'], { ANVIL_API_KEY: developer.key });
    expect(refused.code).toBe(4);
    expect((await anvil(['join-token', '--uses', 'many'])).code).toBe(2);

    expect((await anvil(['jobs', 'list'])).stdout).toMatch(/^ID\s+NAME\s+STATUS\s+GPUS\s+PROGRESS\s+AGE\n$/);
    const bad = await anvil(['jobs', 'create', '--data', '{"name":"x","maxWorkers":0}']);
    expect(bad.code).toBe(6);
    expect(bad.stderr).toMatch(/^anvil: .+ \(VALIDATION_ERROR, HTTP 400, request [\w-]+\)\n$/);
    expect((await anvil(['jobs', 'create', '--data', '{nope'])).code).toBe(2);
    expect((await anvil(['jobs', 'stop', 'job_nope'])).code).toBe(5);
    expect((await anvil(['clusters', 'start', 'cluster_nope'])).code).toBe(5);
  });

  it('documents every command with --help and examples; the built bundle runs with node alone', async () => {
    for (const command of COMMANDS.filter((c) => !c.path[0]!.startsWith('__'))) {
      const help = await anvil([...command.path, '--help']);
      expect(help.code).toBe(0);
      expect(help.stdout).toContain(`Usage: anvil ${command.path.join(' ')}`);
      expect(help.stdout, command.path.join(' ')).toMatch(/\nExamples:\n {2}\S/);
    }
    const main = await cliProcess(bundle, ['--help'], env);
    expect(main.code).toBe(0);
    expect(main.stdout).toContain('Exit codes:');
    expect(main.stdout).toContain('anvil ssh-config');
    const group = await cliProcess(bundle, ['clusters'], env);
    expect(group.code).toBe(2);
    expect(group.stdout).toContain('clusters create');
    // ssh's own options after the cluster belong to the remote command, not to anvil.
    const sshHelp = await anvil(['ssh', '--help']);
    expect(sshHelp.stdout).toContain('Usage: anvil ssh [options] <cluster> [command...]');
  });

  it('installs with npm install -g <checkout>/cli and runs as npx anvil in the checkout', async () => {
    const prefix = join(dir, 'prefix');
    const repo = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
    const npmEnv = { ...env, npm_config_cache: join(dir, 'npm-cache'), npm_config_update_notifier: 'false' };
    const install = await runProcess(
      'npm',
      ['install', '-g', '--prefix', prefix, '--offline', '--no-audit', '--no-fund', join(repo, 'cli')],
      npmEnv,
    );
    expect(install.code, install.stderr).toBe(0);
    const installed = await runProcess(join(prefix, 'bin', 'anvil'), ['whoami', '--json'], {
      ...env,
      ANVIL_URL: url,
      ANVIL_API_KEY: t.ownerKey,
    });
    expect(installed.code, installed.stderr).toBe(0);
    expect(JSON.parse(installed.stdout)).toMatchObject({ valid: true, account_id: t.accountId });
    const npx = await runProcess('npx', ['--offline', 'anvil', '--help'], npmEnv, { cwd: repo });
    expect(npx.code, npx.stderr).toBe(0);
    expect(npx.stdout).toContain('Usage: anvil <command> [options]');
  });

  it('completes commands and options in bash (zsh: the same candidates)', async () => {
    const complete = async (line: string[]) => {
      const script = [
        'set -e',
        'eval "$(anvil completion bash)"',
        `COMP_WORDS=(${line.map((w) => `'${w}'`).join(' ')})`,
        // biome-ignore lint/suspicious/noTemplateCurlyInString: bash expansions, not a template
        'COMP_CWORD=$((${#COMP_WORDS[@]} - 1))',
        '_anvil',
        // biome-ignore lint/suspicious/noTemplateCurlyInString: bash expansions, not a template
        'printf "%s\\n" "${COMPREPLY[@]}"',
      ].join('\n');
      const result = await runProcess('bash', ['-c', script], { ...env, PATH: `${bin}:${env['PATH']}` });
      expect(result.code, result.stderr).toBe(0);
      return result.stdout.trim().split('\n').filter(Boolean).sort();
    };
    expect(await complete(['anvil', 'clu'])).toEqual(['clusters']);
    expect(await complete(['anvil', 'clusters', ''])).toEqual([
      'create',
      'delete',
      'get',
      'list',
      'start',
      'stop',
    ]);
    expect(await complete(['anvil', 'datasets', 'upload', '--par'])).toEqual(['--part-size']);
    const zsh = await anvil(['completion', 'zsh']);
    expect(zsh.stdout).toMatch(/^#compdef anvil\n/);
    expect(zsh.stdout).toContain('anvil __complete');
    expect((await anvil(['completion', 'fish'])).code).toBe(2);
  });
});
