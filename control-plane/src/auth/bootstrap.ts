import { displayPrefix, generateApiKey, hashApiKey, KEY_SCOPES, newId } from '@anvil/shared';
import type { Database } from '../db/index.ts';

export interface BootstrapResult {
  created: boolean;
  accountId: string;
  userId: string;
  /** The owner key's value when this start generated it (printed once); null otherwise. */
  generatedKey: string | null;
}

/**
 * On an empty database, creates the owner account (the operators' account), the owner user and an
 * owner key with every
 * permission and scope. Later starts find the owner and create nothing. The check and the inserts run
 * in one transaction under an advisory lock, so two replicas starting together make one owner.
 */
export async function bootstrapOwner(
  db: Database,
  options: { ownerEmail: string; bootstrapApiKey: string | null },
): Promise<BootstrapResult> {
  return db.prisma.$transaction(async (tx) => {
    await tx.$executeRawUnsafe('SELECT pg_advisory_xact_lock(7245318002)');
    const owner = await tx.user.findFirst({ where: { role: 'owner' }, orderBy: { createdAt: 'asc' } });
    if (owner) return { created: false, accountId: owner.accountId, userId: owner.id, generatedKey: null };

    const accountId = newId('acc');
    const userId = newId('usr');
    const value = options.bootstrapApiKey ?? generateApiKey('live');
    // The bootstrap owner's account is the operators' account: its owners and admins run the fleet.
    await tx.account.create({ data: { id: accountId, name: 'Default', tier: 'enterprise', operator: true } });
    await tx.user.create({
      data: {
        id: userId,
        accountId,
        email: options.ownerEmail,
        name: 'Owner',
        role: 'owner',
        status: 'active',
      },
    });
    await tx.apiKey.create({
      data: {
        id: newId('key'),
        accountId,
        userId,
        name: 'Owner bootstrap key',
        type: 'read_write',
        environment: value.startsWith('anv_test_') ? 'test' : 'live',
        permissions: ['read', 'write'],
        scopes: [...KEY_SCOPES],
        displayPrefix: displayPrefix(value),
        hash: hashApiKey(value),
      },
    });
    return { created: true, accountId, userId, generatedKey: options.bootstrapApiKey ? null : value };
  });
}
