import { ApiError, newId } from '@anvil/shared';
import type { AccessRevocations } from '../access-revocation/revocations.ts';
import type { Actor } from '../accounts/access.ts';
import type { Clock } from '../auth/clock.ts';
import type { SshKey } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import { parsePublicKey } from './public-key.ts';

export interface SshKeyInput {
  name: string;
  public_key: string;
}

export function viewSshKey(row: SshKey) {
  return {
    id: row.id,
    name: row.name,
    key_type: row.keyType,
    public_key: row.comment ? `${row.publicKey} ${row.comment}` : row.publicKey,
    fingerprint: row.fingerprint,
    bits: row.bits,
    comment: row.comment,
    created_at: row.createdAt.toISOString(),
    last_used_at: row.lastUsedAt ? row.lastUsedAt.toISOString() : null,
  };
}

/**
 * Members' SSH public keys. A key belongs to one member of one account; the same key may be registered
 * by members of different accounts (each row is looked up within the cluster's account), but only once
 * per member (409 SSH_KEY_EXISTS).
 */
export class SshKeyService {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly revocations: AccessRevocations,
  ) {}

  async add(actor: Actor, input: SshKeyInput) {
    const name = input.name.trim();
    if (name === '') {
      throw new ApiError('VALIDATION_ERROR', 'name must not be blank', { field: 'name', reason: 'is blank' });
    }
    const key = parsePublicKey(input.public_key);
    const { accountId, userId } = actor.principal;
    const existing = await this.db.prisma.sshKey.findFirst({
      where: { userId, fingerprint: key.fingerprint },
    });
    if (existing) throw exists(existing);
    try {
      const row = await this.db.prisma.sshKey.create({
        data: {
          id: newId('sshkey'),
          accountId,
          userId,
          name,
          keyType: key.type,
          publicKey: key.openssh,
          fingerprint: key.fingerprint,
          bits: key.bits,
          comment: key.comment,
          createdAt: this.clock.now(),
        },
      });
      return viewSshKey(row);
    } catch (error) {
      // Two concurrent adds of the same key: the unique index decides.
      if ((error as { code?: string }).code === 'P2002') {
        const row = await this.db.prisma.sshKey.findFirst({
          where: { userId, fingerprint: key.fingerprint },
        });
        if (row) throw exists(row);
      }
      throw error;
    }
  }

  async list(actor: Actor) {
    const rows = await this.db.prisma.sshKey.findMany({
      where: { userId: actor.principal.userId, accountId: actor.principal.accountId },
      orderBy: [{ createdAt: 'asc' }, { id: 'asc' }],
    });
    return { ssh_keys: rows.map(viewSshKey), total: rows.length };
  }

  async remove(actor: Actor, id: string) {
    const row = await this.db.prisma.sshKey.findFirst({
      where: { id, userId: actor.principal.userId, accountId: actor.principal.accountId },
    });
    if (!row) {
      throw new ApiError('SSH_KEY_NOT_FOUND', `no SSH key ${id} on your profile`, { ssh_key_id: id });
    }
    await this.db.prisma.sshKey.delete({ where: { id: row.id } });
    // SSH connections that authenticated with the key end in every process.
    await this.revocations.publish({
      accountId: row.accountId,
      reason: 'ssh_key_deleted',
      userId: row.userId,
      sshKeyId: row.id,
    });
    return { id: row.id, deleted: true, message: `SSH key ${row.name} removed` };
  }

  /** Keys with this fingerprint held by members of the account (the SSH relay's lookup). */
  async findByFingerprint(accountId: string, fingerprint: string): Promise<SshKey[]> {
    return this.db.prisma.sshKey.findMany({
      where: { accountId, fingerprint },
      orderBy: { createdAt: 'asc' },
    });
  }

  async markUsed(id: string): Promise<void> {
    await this.db.prisma.sshKey.updateMany({ where: { id }, data: { lastUsedAt: this.clock.now() } });
  }
}

function exists(row: SshKey): ApiError {
  return new ApiError('SSH_KEY_EXISTS', `this key is already on your profile as "${row.name}"`, {
    ssh_key_id: row.id,
    fingerprint: row.fingerprint,
  });
}
