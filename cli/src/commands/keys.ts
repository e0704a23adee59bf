import type { Command } from '../command.ts';
import { EXIT, UsageError } from '../exit-codes.ts';
import { table } from '../output.ts';

interface ApiKey {
  id: string;
  name: string;
  type: string;
  status: string;
  permissions: string[];
  scopes: string[];
  prefix: string;
  expiresAt: string | null;
  lastUsedAt: string | null;
  createdAt: string;
}

const list: Command = {
  path: ['keys', 'list'],
  summary: "List the account's API keys (never their values)",
  examples: ['anvil keys list'],
  async run(context) {
    const { api_keys: keys } = await context.api().call<{ api_keys: ApiKey[] }>('GET', '/v2/auth/api-keys');
    context.show(keys, () =>
      table(keys, [
        { header: 'id', value: (k) => k.id },
        { header: 'name', value: (k) => k.name },
        { header: 'status', value: (k) => k.status },
        { header: 'permissions', value: (k) => k.permissions.join(',') },
        { header: 'prefix', value: (k) => k.prefix },
        { header: 'last used', value: (k) => k.lastUsedAt },
        { header: 'expires', value: (k) => k.expiresAt ?? 'never' },
      ]),
    );
    return EXIT.ok;
  },
};

const create: Command = {
  path: ['keys', 'create'],
  summary: 'Create an API key (its value is printed once)',
  options: {
    name: { type: 'string', description: 'Name (required)', value: 'name' },
    permission: {
      type: 'string',
      multiple: true,
      description: 'read, write, delete or admin (default: read and write)',
      value: 'permission',
    },
    scope: {
      type: 'string',
      multiple: true,
      description: "A scope (default: the calling key's)",
      value: 'scope',
    },
    'expires-at': { type: 'string', description: 'ISO 8601 expiry (default: never)', value: 'time' },
    type: { type: 'string', description: 'read, read_write or service', value: 'type' },
  },
  examples: [
    'anvil keys create --name ci --permission read --permission write --scope clusters',
    'anvil keys create --name ro --permission read --json | jq -r .value',
  ],
  async run(context, { values }) {
    const name = values['name'] as string | undefined;
    if (!name) throw new UsageError('--name is required');
    const body = {
      name,
      permissions: (values['permission'] as string[] | undefined) ?? ['read', 'write'],
      ...(values['scope'] ? { scopes: values['scope'] } : {}),
      ...(values['expires-at'] ? { expiresAt: values['expires-at'] } : {}),
      ...(values['type'] ? { type: values['type'] } : {}),
    };
    const created = await context
      .api()
      .call<{ key: ApiKey; value: string }>('POST', '/v2/auth/api-keys', { body });
    context.show(
      created,
      () => `${created.key.id} created. Store the key now, it is not shown again:\n${created.value}\n`,
    );
    return EXIT.ok;
  },
};

const revoke: Command = {
  path: ['keys', 'revoke'],
  summary: 'Revoke an API key: it stops working at once',
  args: '<key id>',
  arity: [1, 1],
  examples: ['anvil keys revoke key_abc123'],
  async run(context, { positionals }) {
    const result = await context
      .api()
      .call<{ key: ApiKey; message: string }>(
        'DELETE',
        `/v2/auth/api-keys/${encodeURIComponent(positionals[0]!)}`,
      );
    context.show(result, () => `${result.message}\n`);
    return EXIT.ok;
  },
};

export const keyCommands = [list, create, revoke];
