import { ApiClient } from '../api.ts';
import type { Command, Context } from '../command.ts';
import { checkProfileName, normaliseUrl } from '../config.ts';
import { CliError, EXIT, UsageError } from '../exit-codes.ts';
import { table } from '../output.ts';
import { readAllText } from '../streams.ts';

interface Verify {
  valid: boolean;
  key_id: string;
  account_id: string;
  permissions: string[];
  scopes: string[];
  type: string;
  environment: string;
  expires_at: string | null;
}

async function keyFrom(context: Context, flag: string | undefined): Promise<string> {
  if (flag === '-') return (await readAllText(context.io.stdin)).trim();
  const key = flag ?? context.env['ANVIL_API_KEY'];
  if (!key)
    throw new UsageError('give the API key with --key (or --key - to read it from stdin, or ANVIL_API_KEY)');
  return key;
}

const login: Command = {
  path: ['login'],
  summary: 'Check an API key and store it in a profile',
  description:
    'Checks the key with GET /v2/auth/verify, then stores URL and key in ~/.config/anvil/config.json (mode 0600) ' +
    'under the profile (default "default") and makes it the current one.',
  options: {
    url: {
      type: 'string',
      description: 'The control plane, e.g. https://anvil.example.com (or ANVIL_URL)',
      value: 'url',
    },
    key: {
      type: 'string',
      description: 'The API key; "-" reads it from stdin (or ANVIL_API_KEY)',
      value: 'key',
    },
  },
  examples: [
    'anvil login --url https://anvil.example.com --key anv_live_…',
    'pass show anvil | anvil login --url https://anvil.example.com --key - --profile prod',
  ],
  async run(context, { values }) {
    const url = (values['url'] as string | undefined) ?? context.env['ANVIL_URL'];
    if (!url) throw new UsageError('give the control plane with --url (or ANVIL_URL)');
    const base = normaliseUrl(url);
    const key = await keyFrom(context, values['key'] as string | undefined);
    const verify = await new ApiClient(base, key, context.io.fetch).call<Verify>('GET', '/v2/auth/verify');
    const name = checkProfileName(context.profileFlag ?? context.env['ANVIL_PROFILE'] ?? 'default');
    const config = context.store.read();
    config.profiles[name] = { url: base, key, accountId: verify.account_id, keyId: verify.key_id };
    config.current = name;
    context.store.write(config);
    context.show(
      { profile: name, url: base, ...verify },
      () =>
        `Logged in to ${base} as key ${verify.key_id} (account ${verify.account_id}, ${verify.permissions.join('/')}); profile "${name}" saved in ${context.store.path}\n`,
    );
    return EXIT.ok;
  },
};

const logout: Command = {
  path: ['logout'],
  summary: 'Forget the key of a profile (the current one, --profile, or --all)',
  options: { all: { type: 'boolean', description: 'Forget every profile' } },
  examples: ['anvil logout', 'anvil logout --profile staging', 'anvil logout --all'],
  async run(context, { values }) {
    const config = context.store.read();
    const names = values['all']
      ? Object.keys(config.profiles)
      : [context.profileFlag ?? config.current ?? ''];
    for (const name of names) {
      if (!config.profiles[name]) throw new CliError(`no profile "${name}" to log out of`, EXIT.notFound);
      delete config.profiles[name];
    }
    if (config.current && !config.profiles[config.current]) config.current = null;
    context.store.write(config);
    context.show({ removed: names }, () => `Logged out: ${names.join(', ') || 'nothing to do'}\n`);
    return EXIT.ok;
  },
};

const profilesList: Command = {
  path: ['profiles', 'list'],
  summary: 'List the stored profiles (keys shown by prefix only)',
  examples: ['anvil profiles list'],
  async run(context) {
    const config = context.store.read();
    const rows = Object.entries(config.profiles).map(([name, p]) => ({
      name,
      current: name === config.current,
      url: p.url,
      keyPrefix: `${p.key.slice(0, 12)}…`,
      keyId: p.keyId ?? null,
      accountId: p.accountId ?? null,
    }));
    context.show(rows, () =>
      table(rows, [
        { header: '', value: (r) => (r.current ? '*' : ' ') },
        { header: 'name', value: (r) => r.name },
        { header: 'url', value: (r) => r.url },
        { header: 'key', value: (r) => r.keyPrefix },
        { header: 'account', value: (r) => r.accountId },
      ]),
    );
    return EXIT.ok;
  },
};

const profilesUse: Command = {
  path: ['profiles', 'use'],
  summary: 'Make a profile the current one',
  args: '<name>',
  arity: [1, 1],
  examples: ['anvil profiles use prod'],
  async run(context, { positionals }) {
    const name = positionals[0]!;
    const config = context.store.read();
    if (!config.profiles[name])
      throw new CliError(`no profile "${name}" (see anvil profiles list)`, EXIT.notFound);
    config.current = name;
    context.store.write(config);
    context.show({ current: name }, () => `Now using profile "${name}" (${config.profiles[name]!.url})\n`);
    return EXIT.ok;
  },
};

const whoami: Command = {
  path: ['whoami'],
  summary: 'Show the key, account, permissions and scopes in use',
  examples: ['anvil whoami', 'anvil whoami --profile prod --json'],
  async run(context) {
    const api = context.api();
    const verify = await api.call<Verify>('GET', '/v2/auth/verify');
    context.show({ url: api.baseUrl, ...verify }, () =>
      table(
        [verify],
        [
          { header: 'key', value: (v) => v.key_id },
          { header: 'account', value: (v) => v.account_id },
          { header: 'permissions', value: (v) => v.permissions.join(',') },
          { header: 'scopes', value: (v) => v.scopes.join(',') },
          { header: 'expires', value: (v) => v.expires_at ?? 'never' },
        ],
      ),
    );
    return EXIT.ok;
  },
};

export const authCommands = [login, logout, profilesList, profilesUse, whoami];
