import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { type TSchema, Type } from '@sinclair/typebox';
import type { AppContext } from '../../context.ts';
import { flatErrors } from '../../http/error-body.ts';
import { HostIdParams } from './admin.schemas.ts';
import { requireOperator } from './operator.ts';

const Nullable = <T extends TSchema>(schema: T) => Type.Union([schema, Type.Null()]);
const Version = Type.String({
  pattern: '^[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}$',
  description: 'An agent version',
});

const FleetAgentVersion = Type.Object({
  desiredVersion: Nullable(
    Type.String({ description: 'What unpinned hosts run; null: manual (no fleet-wide upgrade)' }),
  ),
  source: Type.Union([Type.Literal('admin'), Type.Literal('env'), Type.Literal('default')], {
    description:
      'admin: set with PUT /v2/admin/agent-version; env: ANVIL_AGENT_VERSION; default: the version this control plane ships',
  }),
  bundledVersion: Type.String({ description: 'The agent version this control plane ships' }),
  availableVersions: Type.Array(Type.String(), { description: 'Versions with an artifact to install' }),
  updatedAt: Nullable(Type.String({ format: 'date-time' })),
  updatedById: Nullable(Type.String()),
});

const HostAgentVersion = Type.Object({
  hostId: Type.String(),
  current: Nullable(Type.String({ description: 'What the agent reported in its last hello' })),
  desired: Nullable(Type.String({ description: "Its pin, else the fleet's desired version" })),
  pinned: Nullable(Type.String()),
  arch: Nullable(Type.String({ description: "The host's architecture (x64, arm64) from its inventory" })),
});

const UpgradeOutcome = Type.Object({
  sent: Type.Boolean({ description: 'True when the agent was told to upgrade and answered' }),
  from: Type.Optional(Nullable(Type.String())),
  to: Type.Optional(Type.String()),
  sha256: Type.Optional(Type.String()),
  result: Type.Optional(Type.Unknown({ description: "The agent's answer: {version, previous, installDir}" })),
  reason: Type.Optional(Type.String({ description: 'Why nothing was sent, or why the upgrade failed' })),
});

/**
 * The operators' control over agent versions: the fleet's desired version, and per-host pins that
 * upgrade (or hold back) one host at a time. Every change is audit-logged (type fleet_change).
 */
export const adminAgentVersionRoutes: FastifyPluginAsyncTypebox<{ context: AppContext }> = async (
  app,
  { context },
) => {
  const { agentVersions } = context.fleet;
  app.addHook('onRequest', requireOperator(context));
  const tags = ['admin'];
  const config = { scope: 'accounts' as const };

  app.get(
    '/v2/admin/agent-version',
    {
      config,
      schema: {
        tags,
        summary: "The fleet's desired agent version and the versions available",
        response: { 200: FleetAgentVersion, ...flatErrors(401, 403, 429) },
      },
    },
    async () => agentVersions.fleet(),
  );

  app.put(
    '/v2/admin/agent-version',
    {
      config,
      schema: {
        tags,
        summary: "Set the fleet's desired agent version; connected unpinned hosts upgrade to it",
        description:
          'desiredVersion null: manual, hosts change version only when pinned one by one ' +
          '(POST /v2/admin/hosts/{host_id}/upgrade). The version must have a published artifact.',
        body: Type.Object({ desiredVersion: Nullable(Version) }, { additionalProperties: false }),
        response: { 200: FleetAgentVersion, ...flatErrors(400, 401, 403, 429) },
      },
    },
    async (request) => {
      const principal = request.principal!;
      const before = await agentVersions.fleet();
      const fleet = await agentVersions.setFleet(request.body.desiredVersion, principal.userId);
      await context.accounts.audit.record({
        accountId: principal.accountId,
        type: 'fleet_change',
        action: 'agent_version_set',
        actor: { userId: principal.userId, ip: request.ip },
        details: { from: before.desiredVersion, to: fleet.desiredVersion, keyId: principal.keyId },
      });
      return fleet;
    },
  );

  app.post(
    '/v2/admin/hosts/:host_id/upgrade',
    {
      config,
      schema: {
        tags,
        summary: "Pin a host's agent version and upgrade its agent now",
        description:
          "version: pin the host to it (it must be published for the host's architecture); null: unpin " +
          "(the host follows the fleet's version again); omitted: pin to the version this control plane ships. " +
          'A connected agent that runs another version downloads the artifact, checks its SHA-256 and ' +
          'restarts into it; containers keep running. A disconnected one upgrades when it next connects.',
        params: HostIdParams,
        body: Type.Optional(
          Type.Object({ version: Type.Optional(Nullable(Version)) }, { additionalProperties: false }),
        ),
        response: {
          200: Type.Object({ host: HostAgentVersion, upgrade: UpgradeOutcome, message: Type.String() }),
          ...flatErrors(400, 401, 403, 404, 429),
        },
      },
    },
    async (request) => {
      const principal = request.principal!;
      const hostId = request.params.host_id;
      const requested = request.body?.version;
      const version = requested === undefined ? context.fleet.artifacts.bundledVersion : requested;
      const before = await agentVersions.host(hostId);
      const { host, upgrade } = await agentVersions.pin(hostId, version);
      await context.accounts.audit.record({
        accountId: principal.accountId,
        type: 'fleet_change',
        action: 'agent_upgrade',
        actor: { userId: principal.userId, ip: request.ip },
        resource: { type: 'host', id: hostId },
        details: {
          from: before.current,
          pinnedBefore: before.pinned,
          pinned: host.pinned,
          desired: host.desired,
          sent: upgrade.sent,
          ...(upgrade.sent ? {} : { reason: upgrade.reason }),
          keyId: principal.keyId,
        },
      });
      const message = upgrade.sent
        ? `host ${hostId} is upgrading its agent from ${upgrade.from ?? 'unknown'} to ${upgrade.to}`
        : `host ${hostId} ${host.pinned ? `pinned to ${host.pinned}` : 'follows the fleet version'}; no upgrade sent: ${upgrade.reason}`;
      return { host, upgrade, message };
    },
  );
};
