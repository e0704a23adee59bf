import { ApiError } from '@anvil/shared';
import type { CommandBody } from '@anvil/shared/protocol';
import type { ArtifactArch } from '../../agent-artifacts/build.ts';
import { isArtifactArch } from '../../agent-artifacts/build.ts';
import type { AgentArtifactStore } from '../../agent-artifacts/store.ts';
import type { Clock } from '../../auth/clock.ts';
import { AGENT_VERSION_PATTERN } from '../../config.ts';
import type { Database } from '../../db/index.ts';
import type { Logger } from '../../logger.ts';

const FLEET_ROW = 'fleet';

/** How long an agent has to download, verify and unpack an artifact before the command times out. */
export const UPGRADE_COMMAND_TIMEOUT_MS = 300_000;

export interface FleetAgentVersion {
  /** The version unpinned hosts run; null: manual (no fleet-wide upgrade). */
  desiredVersion: string | null;
  /** admin: PUT /v2/admin/agent-version; env: ANVIL_AGENT_VERSION; default: the version shipped. */
  source: 'admin' | 'env' | 'default';
  /** The agent version this control plane ships (built from its checkout). */
  bundledVersion: string;
  /** Versions with an artifact here (the bundled one is built on first request). */
  availableVersions: string[];
  updatedAt: string | null;
  updatedById: string | null;
}

export interface HostAgentVersion {
  hostId: string;
  /** What the agent reported in its last hello. */
  current: string | null;
  /** What it should run: its pin, else the fleet's (null: manual and not pinned). */
  desired: string | null;
  pinned: string | null;
  arch: string | null;
}

/** What the control plane sends an agent to upgrade (the protocol's upgrade_agent command). */
export type UpgradeCommand = Extract<CommandBody, { name: 'upgrade_agent' }>;

export interface UpgradeSender {
  isConnectedHere(hostId: string): boolean;
  sendCommand(hostId: string, command: CommandBody, timeoutMs?: number): Promise<unknown>;
}

/**
 * Which agent version each host should run, and getting it there. A host runs its pin when it has one,
 * else the fleet's desired version (the admin setting, else ANVIL_AGENT_VERSION, else the version this
 * control plane ships; `manual`/null: none). Whenever a host's agent says hello with another version, or
 * an operator changes a pin or the fleet's version, its agent is sent upgrade_agent: it downloads the
 * artifact for its architecture, checks its SHA-256, switches its `current` link and restarts under
 * systemd. Containers are Docker's and keep running; the restarted agent reconciles them.
 */
export class AgentVersionPolicy {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly store: AgentArtifactStore,
    /** ANVIL_AGENT_VERSION (a version, `manual`, or null). */
    private readonly configured: string | null,
    private readonly sender: UpgradeSender,
    private readonly logger: Logger,
  ) {}

  async fleet(): Promise<FleetAgentVersion> {
    const row = await this.db.prisma.agentVersionSetting.findUnique({ where: { id: FLEET_ROW } });
    const bundledVersion = this.store.bundledVersion;
    const base = {
      bundledVersion,
      availableVersions: await this.store.versions(),
      updatedAt: row?.updatedAt.toISOString() ?? null,
      updatedById: row?.updatedById ?? null,
    };
    if (row) return { ...base, desiredVersion: row.desiredVersion, source: 'admin' };
    return {
      ...base,
      desiredVersion: this.#unsetDesired(),
      source: this.configured !== null ? 'env' : 'default',
    };
  }

  /** Sets the fleet's version (null: manual) and upgrades the connected unpinned hosts that differ. */
  async setFleet(version: string | null, updatedById: string | null): Promise<FleetAgentVersion> {
    if (version !== null) await this.#checkVersion(version, null);
    const now = this.clock.now();
    await this.db.prisma.agentVersionSetting.upsert({
      where: { id: FLEET_ROW },
      create: { id: FLEET_ROW, desiredVersion: version, updatedAt: now, updatedById },
      update: { desiredVersion: version, updatedAt: now, updatedById },
    });
    const hosts = await this.db.prisma.host.findMany({
      where: { deletedAt: null, agentVersionPin: null, connectionId: { not: null } },
      select: { id: true },
    });
    for (const host of hosts) void this.reconcile(host.id);
    return this.fleet();
  }

  /**
   * One statement (it runs on every hello): the host's version, pin and architecture with the fleet's
   * setting row, not the artifact list fleet() also reads.
   */
  async host(hostId: string): Promise<HostAgentVersion> {
    const [row] = await this.db.sql.query<{
      id: string;
      agent_version: string | null;
      agent_version_pin: string | null;
      arch: string | null;
      setting: boolean;
      desired_version: string | null;
    }>(
      `SELECT h.id, h.agent_version, h.agent_version_pin, h.inventory #>> '{host,os,arch}' AS arch,
              s.id IS NOT NULL AS setting, s.desired_version
       FROM hosts h LEFT JOIN agent_version_settings s ON s.id = $2
       WHERE h.id = $1 AND h.deleted_at IS NULL`,
      [hostId, FLEET_ROW],
    );
    if (!row) throw new ApiError('HOST_NOT_FOUND', `host ${hostId} not found`, { hostId });
    return {
      hostId: row.id,
      current: row.agent_version,
      desired: row.agent_version_pin ?? (row.setting ? row.desired_version : this.#unsetDesired()),
      pinned: row.agent_version_pin,
      arch: row.arch,
    };
  }

  /** The fleet's version when no admin setting is stored: ANVIL_AGENT_VERSION, else the bundled one. */
  #unsetDesired(): string | null {
    if (this.configured === null) return this.store.bundledVersion;
    return this.configured === 'manual' ? null : this.configured;
  }

  /**
   * Pins the host to `version` (null: unpins it, it follows the fleet again) and, when its agent is
   * connected and runs another version, has it upgrade now. Answers what was sent, or why nothing was.
   */
  async pin(
    hostId: string,
    version: string | null,
  ): Promise<{ host: HostAgentVersion; upgrade: UpgradeOutcome }> {
    const before = await this.host(hostId);
    if (version !== null) await this.#checkVersion(version, before.arch);
    await this.db.prisma.host.update({ where: { id: hostId }, data: { agentVersionPin: version } });
    const upgrade = await this.reconcile(hostId);
    return { host: await this.host(hostId), upgrade };
  }

  /**
   * Sends the host's agent an upgrade when the version it runs differs from its desired one. Never
   * throws: the outcome says what happened (the agent's answer, or why nothing was sent).
   */
  async reconcile(hostId: string): Promise<UpgradeOutcome> {
    let target: HostAgentVersion | null = null;
    try {
      target = await this.host(hostId);
      if (target.desired === null) return { sent: false, reason: 'no desired version (manual)' };
      if (target.current === target.desired) return { sent: false, reason: 'already at the desired version' };
      if (!target.arch || !isArtifactArch(target.arch)) {
        return { sent: false, reason: `no artifact is built for architecture ${target.arch ?? 'unknown'}` };
      }
      if (!this.sender.isConnectedHere(hostId)) {
        return {
          sent: false,
          reason: 'the agent is not connected to this process; it upgrades on its next hello',
        };
      }
      const artifact = await this.store.get(target.desired, target.arch);
      const command: UpgradeCommand = {
        name: 'upgrade_agent',
        version: artifact.version,
        path: artifactPath(artifact.version, artifact.file),
        sha256: artifact.sha256,
        sizeBytes: artifact.sizeBytes,
      };
      this.logger.info(
        { hostId, from: target.current, to: artifact.version, sha256: artifact.sha256 },
        'agent upgrade sent',
      );
      const result = await this.sender.sendCommand(hostId, command, UPGRADE_COMMAND_TIMEOUT_MS);
      return { sent: true, from: target.current, to: artifact.version, sha256: artifact.sha256, result };
    } catch (error) {
      const reason = error instanceof Error ? error.message : String(error);
      this.logger.warn({ hostId, to: target?.desired ?? null, err: reason }, 'agent upgrade failed');
      return { sent: false, reason };
    }
  }

  async #checkVersion(version: string, arch: string | null): Promise<void> {
    if (!AGENT_VERSION_PATTERN.test(version)) {
      throw new ApiError('VALIDATION_ERROR', 'version must look like 1.2.3 (letters, digits, . + _ -)', {
        field: 'version',
        reason: 'bad format',
      });
    }
    const arches: ArtifactArch[] =
      arch && isArtifactArch(arch) ? [arch] : (['x64', 'arm64'] satisfies ArtifactArch[]);
    for (const a of arches) if (await this.store.available(version, a)) return;
    throw new ApiError(
      'VALIDATION_ERROR',
      `no agent artifact of version ${version}${arch ? ` for linux-${arch}` : ''} is published here; build it with npm run build:agent-artifact`,
      { field: 'version', reason: 'not published', available: await this.store.versions() },
    );
  }
}

export type UpgradeOutcome =
  | { sent: true; from: string | null; to: string; sha256: string; result: unknown }
  | { sent: false; reason: string };

/** URL path of an artifact file on the control plane. */
export function artifactPath(version: string, file: string): string {
  return `/agent/artifacts/${encodeURIComponent(version)}/${encodeURIComponent(file)}`;
}
