import { ApiError, newId } from '@anvil/shared';
import type { Clock } from '../../auth/clock.ts';
import type { HostJoinToken } from '../../db/generated/client.ts';
import type { Database } from '../../db/index.ts';
import { generateJoinToken, hashSecret, joinTokenPrefix } from './secrets.ts';

/** Join tokens live 24 hours unless the operator says otherwise, and never longer than a year. */
export const DEFAULT_JOIN_TOKEN_TTL_SECONDS = 86_400;
export const MAX_JOIN_TOKEN_TTL_SECONDS = 31_536_000;

export type JoinTokenStatus = 'active' | 'expired' | 'revoked' | 'used_up';

export interface JoinTokenView {
  id: string;
  description: string | null;
  prefix: string;
  region: string | null;
  maxUses: number | null;
  useCount: number;
  remainingUses: number | null;
  status: JoinTokenStatus;
  expiresAt: string;
  revokedAt: string | null;
  lastUsedAt: string | null;
  createdAt: string;
  createdByUserId: string | null;
  createdByKeyId: string | null;
}

export interface CreateJoinTokenInput {
  description?: string | null | undefined;
  /** 1 = single use (the default); null = any number of uses until expiry. */
  maxUses?: number | null | undefined;
  expiresIn?: number | undefined;
  expiresAt?: string | undefined;
  region?: string | null | undefined;
}

export interface Creator {
  userId: string | null;
  keyId: string | null;
}

export function joinTokenStatus(row: HostJoinToken, now: Date): JoinTokenStatus {
  if (row.revokedAt) return 'revoked';
  if (row.maxUses !== null && row.useCount >= row.maxUses) return 'used_up';
  if (row.expiresAt.getTime() <= now.getTime()) return 'expired';
  return 'active';
}

function view(row: HostJoinToken, now: Date): JoinTokenView {
  return {
    id: row.id,
    description: row.description,
    prefix: row.displayPrefix,
    region: row.region,
    maxUses: row.maxUses,
    useCount: row.useCount,
    remainingUses: row.maxUses === null ? null : Math.max(0, row.maxUses - row.useCount),
    status: joinTokenStatus(row, now),
    expiresAt: row.expiresAt.toISOString(),
    revokedAt: row.revokedAt?.toISOString() ?? null,
    lastUsedAt: row.lastUsedAt?.toISOString() ?? null,
    createdAt: row.createdAt.toISOString(),
    createdByUserId: row.createdByUserId,
    createdByKeyId: row.createdByKeyId,
  };
}

function invalid(field: string, reason: string): ApiError {
  return new ApiError('VALIDATION_ERROR', `${field} ${reason}`, { field, reason });
}

/** Operators' join tokens: created (value shown once), listed, revoked. Registration consumes them (hosts.ts). */
export class JoinTokenService {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
  ) {}

  async create(
    creator: Creator,
    input: CreateJoinTokenInput,
  ): Promise<{ token: JoinTokenView; value: string }> {
    const now = this.clock.now();
    if (input.expiresIn !== undefined && input.expiresAt !== undefined) {
      throw invalid('expiresAt', 'cannot be combined with expiresIn');
    }
    let expiresAt: Date;
    if (input.expiresAt !== undefined) {
      expiresAt = new Date(input.expiresAt);
      if (Number.isNaN(expiresAt.getTime()) || expiresAt.getTime() <= now.getTime()) {
        throw invalid('expiresAt', 'must be an ISO 8601 time in the future');
      }
      if (expiresAt.getTime() - now.getTime() > MAX_JOIN_TOKEN_TTL_SECONDS * 1000) {
        throw invalid('expiresAt', 'must be at most one year ahead');
      }
    } else {
      const seconds = input.expiresIn ?? DEFAULT_JOIN_TOKEN_TTL_SECONDS;
      if (!Number.isInteger(seconds) || seconds < 1 || seconds > MAX_JOIN_TOKEN_TTL_SECONDS) {
        throw invalid('expiresIn', `must be 1-${MAX_JOIN_TOKEN_TTL_SECONDS} seconds`);
      }
      expiresAt = new Date(now.getTime() + seconds * 1000);
    }
    const maxUses = input.maxUses === undefined ? 1 : input.maxUses;
    if (maxUses !== null && (!Number.isInteger(maxUses) || maxUses < 1)) {
      throw invalid('maxUses', 'must be a positive integer, or null for unlimited uses until expiry');
    }
    const value = generateJoinToken();
    const row = await this.db.prisma.hostJoinToken.create({
      data: {
        id: newId('jt'),
        description: input.description ?? null,
        hash: hashSecret(value),
        displayPrefix: joinTokenPrefix(value),
        region: input.region ?? null,
        maxUses,
        expiresAt,
        createdByUserId: creator.userId,
        createdByKeyId: creator.keyId,
        createdAt: now,
      },
    });
    return { token: view(row, now), value };
  }

  async list(): Promise<JoinTokenView[]> {
    const rows = await this.db.prisma.hostJoinToken.findMany({
      orderBy: [{ createdAt: 'desc' }, { id: 'asc' }],
    });
    const now = this.clock.now();
    return rows.map((row) => view(row, now));
  }

  async get(id: string): Promise<JoinTokenView> {
    const row = await this.db.prisma.hostJoinToken.findUnique({ where: { id } });
    if (!row) throw new ApiError('JOIN_TOKEN_NOT_FOUND', `no join token ${id}`, { joinTokenId: id });
    return view(row, this.clock.now());
  }

  /** Revoking stops further registrations at once; hosts that already registered keep their credentials. */
  async revoke(id: string): Promise<JoinTokenView> {
    const now = this.clock.now();
    const row = await this.db.prisma.hostJoinToken.findUnique({ where: { id } });
    if (!row) throw new ApiError('JOIN_TOKEN_NOT_FOUND', `no join token ${id}`, { joinTokenId: id });
    const updated = row.revokedAt
      ? row
      : await this.db.prisma.hostJoinToken.update({ where: { id }, data: { revokedAt: now } });
    return view(updated, now);
  }
}
