import { ApiError } from '@anvil/shared';
import type { Principal } from '../principal.ts';
import type { TwoFactorEnrolments } from './enrolments.ts';

/** The request header that carries a current TOTP code or a backup code. */
export const OTP_HEADER = 'x-anvil-otp';

/**
 * Decides whether a sensitive operation may go ahead. A code is needed when the account has
 * security.two_factor.enabled on, or when the caller enrolled (a member may protect their own keys
 * before the account requires it). Then: not enrolled -> 403 OTP_ENROLMENT_REQUIRED; no code -> 401
 * OTP_REQUIRED; a wrong, expired or already used code -> 401 OTP_INVALID.
 */
export class TwoFactorGate {
  constructor(
    private readonly deps: {
      enrolments: TwoFactorEnrolments;
      /** Whether the account's settings turn two-factor on (security.two_factor.enabled). */
      accountRequires: (accountId: string) => Promise<boolean>;
    },
  ) {}

  async required(
    principal: Principal,
  ): Promise<{ required: boolean; enrolled: boolean; byAccount: boolean }> {
    const [byAccount, enrolled] = await Promise.all([
      this.deps.accountRequires(principal.accountId),
      this.deps.enrolments.confirmed(principal.userId),
    ]);
    return { required: byAccount || enrolled, enrolled, byAccount };
  }

  async check(principal: Principal, header: string | string[] | undefined, operation: string): Promise<void> {
    const { required, enrolled } = await this.required(principal);
    if (!required) return;
    if (!enrolled) {
      throw new ApiError(
        'OTP_ENROLMENT_REQUIRED',
        `this account requires two-factor authentication for ${operation}: enrol first ` +
          '(POST /v2/accounts/security/two-factor/enrol, then .../confirm with a code)',
        { operation },
      );
    }
    const code = Array.isArray(header) ? header[0] : header;
    if (code === undefined || code.trim() === '') {
      throw new ApiError(
        'OTP_REQUIRED',
        `${operation} needs a current two-factor code (or a backup code) in the X-Anvil-OTP header`,
        { operation, header: 'X-Anvil-OTP' },
      );
    }
    const used = await this.deps.enrolments.verify(principal.userId, code);
    if (used === null) {
      throw new ApiError(
        'OTP_INVALID',
        'the two-factor code is wrong, expired or already used (a code counts once; backup codes once each)',
        { operation, header: 'X-Anvil-OTP' },
      );
    }
  }

  /** For changes to one's own enrolment: a code is needed only once the caller has one. */
  async checkIfEnrolled(principal: Principal, header: string | string[] | undefined, operation: string) {
    if (await this.deps.enrolments.confirmed(principal.userId))
      await this.check(principal, header, operation);
  }
}
