import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { AppContext } from '../../context.ts';
import { flatErrors } from '../../http/error-body.ts';
import { ACCEPTED_KEY_TYPES, MIN_RSA_BITS } from '../../ssh/public-key.ts';
import { actorOf, DateTime, Nullable } from './common.ts';

const tags = ['profile'];

const SshKey = Type.Object(
  {
    id: Type.String(),
    name: Type.String(),
    key_type: Type.String({ description: `One of ${ACCEPTED_KEY_TYPES.join(', ')}` }),
    public_key: Type.String({ description: 'OpenSSH format: "<type> <base64> [comment]"' }),
    fingerprint: Type.String({ description: 'SHA256:<base64>, as `ssh-keygen -lf` prints it' }),
    bits: Nullable(Type.Integer()),
    comment: Nullable(Type.String()),
    created_at: DateTime,
    last_used_at: Nullable(DateTime),
  },
  { $id: 'SshKey' },
);

const SSH_DESCRIPTION =
  'SSH public keys let you reach clusters through the SSH relay: `ssh -p <ANVIL_SSH_PORT> <cluster_id>@<ANVIL_SSH_HOST>` ' +
  "(the cluster object's `ssh_connection` gives host, port and username). A login is accepted when the offered " +
  "key is registered by a member of the cluster's account who holds `write` on the cluster — its owner, a " +
  'member managing the team, or a member it is shared with (resource shares) for write — and the cluster is ' +
  'running with `ssh_enabled: true`. The session runs in the container through the agent: a PTY shell ' +
  '(bash when the image has it, else sh), `ssh host <command>` with its exit status, `sftp` and `scp` (OpenSSH 9 ' +
  'scp uses SFTP by default; the legacy `scp -O` protocol needs scp in the image and is not supported), and ' +
  '`ssh -L` to container ports (destination localhost or the cluster id; the relay connects to the ' +
  "container's address, so servers must listen on 0.0.0.0, not only 127.0.0.1).";

export const sshKeyRoutes: FastifyPluginAsyncTypebox<{ context: AppContext }> = async (app, { context }) => {
  const keys = context.ssh.keys;
  app.addSchema(SshKey);
  const config = { scope: 'accounts' as const };

  app.get(
    '/v2/accounts/profile/ssh-keys',
    {
      config,
      schema: {
        tags,
        summary: "The caller's SSH public keys",
        description: SSH_DESCRIPTION,
        response: {
          200: Type.Object({ ssh_keys: Type.Array(Type.Ref('SshKey')), total: Type.Integer() }),
          ...flatErrors(401, 403, 429),
        },
      },
    },
    async (request) => keys.list(actorOf(request)),
  );

  app.post(
    '/v2/accounts/profile/ssh-keys',
    {
      config,
      schema: {
        tags,
        summary: "Add an SSH public key to the caller's profile",
        description:
          'public_key is one OpenSSH public key line (the content of `id_ed25519.pub`): ssh-ed25519, ' +
          `ecdsa-sha2-nistp256/384/521, or ssh-rsa of at least ${MIN_RSA_BITS} bits. DSA keys, certificates ` +
          'and private keys are refused with 400 VALIDATION_ERROR {field: public_key, reason}. The fingerprint ' +
          'is SHA-256 of the key blob. The same key twice on one profile: 409 SSH_KEY_EXISTS with the existing ' +
          "key's id.",
        body: Type.Object(
          {
            name: Type.String({ minLength: 1, maxLength: 100 }),
            public_key: Type.String({ minLength: 1, maxLength: 16_384 }),
          },
          { additionalProperties: false },
        ),
        response: { 201: Type.Ref('SshKey'), ...flatErrors(400, 401, 403, 409, 429) },
      },
    },
    async (request, reply) => reply.code(201).send(await keys.add(actorOf(request), request.body)),
  );

  app.delete(
    '/v2/accounts/profile/ssh-keys/:id',
    {
      config,
      schema: {
        tags,
        summary: 'Remove an SSH public key',
        description:
          'Sessions already open stay open; new logins with the key are refused. 404 SSH_KEY_NOT_FOUND.',
        params: Type.Object({ id: Type.String({ maxLength: 64 }) }),
        response: {
          200: Type.Object({ id: Type.String(), deleted: Type.Boolean(), message: Type.String() }),
          ...flatErrors(401, 403, 404, 429),
        },
      },
    },
    async (request) => keys.remove(actorOf(request), request.params.id),
  );
};
