import { createHash, randomBytes } from 'node:crypto';
import { ApiError } from '@anvil/shared';
import type { SecretBox } from '../../crypto/secret-box.ts';
import type { Database } from '../../db/index.ts';
import type { Clock } from '../clock.ts';
import { matchTotp, newTotpSecret, otpauthUri } from './totp.ts';

export const BACKUP_CODE_COUNT = 10;

export interface EnrolmentStatus {
  enrolled: boolean;
  pending: boolean;
  confirmedAt: Date | null;
  backupCodesRemaining: number;
}

/** Backup codes are shown as `xxxxx-xxxxx`; case, spaces and dashes do not matter when one is used. */
const normaliseBackupCode = (code: string) => code.replace(/[\s-]/g, '').toLowerCase();
const hashBackupCode = (code: string) =>
  createHash('sha256').update(normaliseBackupCode(code), 'utf8').digest('hex');

function newBackupCodes(): string[] {
  return Array.from({ length: BACKUP_CODE_COUNT }, () => {
    const code = randomBytes(5).toString('hex');
    return `${code.slice(0, 5)}-${code.slice(5)}`;
  });
}

/**
 * Members' TOTP enrolments: the secret sealed with the secret box (bound to the member, so a sealed
 * secret copied to another row does not open), backup codes kept only as hashes. Knows nothing of when
 * a code is required (that is the gate's job).
 */
export class TwoFactorEnrolments {
  constructor(
    private readonly deps: {
      db: Database;
      clock: Clock;
      secrets: () => SecretBox;
      /** Names the service in authenticator apps. */
      issuer: string;
    },
  ) {}

  private context(userId: string) {
    return `two_factor:${userId}`;
  }

  async status(userId: string): Promise<EnrolmentStatus> {
    const row = await this.deps.db.prisma.twoFactorEnrolment.findUnique({ where: { userId } });
    return {
      enrolled: row?.confirmedAt != null,
      pending: row !== null && row.confirmedAt === null,
      confirmedAt: row?.confirmedAt ?? null,
      backupCodesRemaining: row?.confirmedAt ? row.backupCodeHashes.length : 0,
    };
  }

  async confirmed(userId: string): Promise<boolean> {
    return (await this.status(userId)).enrolled;
  }

  /**
   * Starts (or restarts) an enrolment with a new secret, which counts only once confirmed with a code.
   * Restarting drops a confirmed enrolment at once, which is why its route is a sensitive operation.
   */
  async start(member: { userId: string; accountId: string }) {
    const user = await this.deps.db.prisma.user.findUniqueOrThrow({
      where: { id: member.userId },
      select: { email: true },
    });
    const secret = newTotpSecret();
    const sealed = this.deps.secrets().seal(secret, this.context(member.userId));
    const now = this.deps.clock.now();
    await this.deps.db.prisma.twoFactorEnrolment.upsert({
      where: { userId: member.userId },
      create: { userId: member.userId, accountId: member.accountId, secret: sealed, createdAt: now },
      update: { secret: sealed, confirmedAt: null, backupCodeHashes: [], lastStep: null, createdAt: now },
    });
    return { secret, otpauthUri: otpauthUri(secret, this.deps.issuer, user.email) };
  }

  /** Confirms a pending enrolment with its first code; answers the backup codes, shown this once. */
  async confirm(userId: string, code: string): Promise<string[]> {
    const row = await this.deps.db.prisma.twoFactorEnrolment.findUnique({ where: { userId } });
    if (!row || row.confirmedAt !== null) {
      throw new ApiError('INVALID_STATE', 'no two-factor enrolment is pending: start one first', {
        enrolled: row?.confirmedAt != null,
      });
    }
    const secret = this.deps.secrets().open(row.secret, this.context(userId));
    const step = matchTotp(secret, code, this.deps.clock.now(), null);
    if (step === null) {
      throw new ApiError('OTP_INVALID', 'the code does not match the authenticator secret (or has expired)');
    }
    const codes = newBackupCodes();
    const done = await this.deps.db.prisma.twoFactorEnrolment.updateMany({
      where: { userId, confirmedAt: null, secret: row.secret },
      data: {
        confirmedAt: this.deps.clock.now(),
        lastStep: BigInt(step),
        backupCodeHashes: codes.map(hashBackupCode),
      },
    });
    if (done.count === 0) throw new ApiError('CONFLICT', 'the enrolment changed meanwhile: start again');
    return codes;
  }

  /**
   * Checks a code for a confirmed enrolment and uses it up: a TOTP code only in a later time step than
   * the last one accepted, a backup code once. Both updates are conditional, so two requests racing
   * with the same code cannot both pass.
   */
  async verify(userId: string, code: string): Promise<'totp' | 'backup' | null> {
    const row = await this.deps.db.prisma.twoFactorEnrolment.findUnique({ where: { userId } });
    if (!row || row.confirmedAt === null) return null;
    const given = code.trim();
    if (/^\d{6}$/.test(given)) {
      const last = row.lastStep === null ? null : Number(row.lastStep);
      const secret = this.deps.secrets().open(row.secret, this.context(userId));
      const step = matchTotp(secret, given, this.deps.clock.now(), last);
      if (step === null) return null;
      const used = await this.deps.db.prisma.twoFactorEnrolment.updateMany({
        where: {
          userId,
          secret: row.secret,
          OR: [{ lastStep: null }, { lastStep: { lt: BigInt(step) } }],
        },
        data: { lastStep: BigInt(step) },
      });
      return used.count === 1 ? 'totp' : null;
    }
    const hash = hashBackupCode(given);
    if (!row.backupCodeHashes.includes(hash)) return null;
    const used = await this.deps.db.prisma.twoFactorEnrolment.updateMany({
      where: { userId, secret: row.secret, backupCodeHashes: { has: hash } },
      data: { backupCodeHashes: row.backupCodeHashes.filter((h) => h !== hash) },
    });
    return used.count === 1 ? 'backup' : null;
  }

  /** New backup codes for a confirmed enrolment (the old ones stop working). */
  async regenerateBackupCodes(userId: string): Promise<string[]> {
    const codes = newBackupCodes();
    const done = await this.deps.db.prisma.twoFactorEnrolment.updateMany({
      where: { userId, confirmedAt: { not: null } },
      data: { backupCodeHashes: codes.map(hashBackupCode) },
    });
    if (done.count === 0) throw new ApiError('INVALID_STATE', 'two-factor is not enrolled: enrol first');
    return codes;
  }

  async remove(userId: string): Promise<boolean> {
    const done = await this.deps.db.prisma.twoFactorEnrolment.deleteMany({ where: { userId } });
    return done.count > 0;
  }

  /** Seals secrets still under a previous ANVIL_SECRET_KEY with the current one (key rotation). */
  async reseal(): Promise<number> {
    const box = this.deps.secrets();
    const rows = await this.deps.db.prisma.twoFactorEnrolment.findMany();
    let changed = 0;
    for (const row of rows) {
      if (!box.needsReseal(row.secret)) continue;
      const context = this.context(row.userId);
      await this.deps.db.prisma.twoFactorEnrolment.updateMany({
        where: { userId: row.userId, secret: row.secret },
        data: { secret: box.seal(box.open(row.secret, context), context) },
      });
      changed += 1;
    }
    return changed;
  }
}
