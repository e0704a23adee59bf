import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import { BACKUP_CODE_COUNT } from '../../auth/two-factor/enrolments.ts';
import { OTP_HEADER } from '../../auth/two-factor/gate.ts';
import { TOTP_DIGITS, TOTP_PERIOD_SECONDS } from '../../auth/two-factor/totp.ts';
import type { AppContext } from '../../context.ts';
import { flatErrors } from '../../http/error-body.ts';
import { DateTime, Nullable } from './common.ts';

const tags = ['settings'];

const TWO_FACTOR_DESCRIPTION =
  `Designed (the spec names security.two_factor without its mechanism). Each member enrols their own TOTP ` +
  `authenticator (RFC 6238: HMAC-SHA1, ${TOTP_PERIOD_SECONDS}-second steps, ${TOTP_DIGITS} digits, one step ` +
  'of clock drift either side): enrol answers the secret and an otpauth:// URI, confirm with a first code ' +
  `turns it on and answers ${BACKUP_CODE_COUNT} single-use backup codes, shown once and kept only hashed. ` +
  'Sensitive operations (API key creation and rotation, secret reveal, settings export with secrets, member ' +
  'removal, role and permission changes, security settings) then need a current code, or a backup code, in ' +
  'the X-Anvil-OTP header: when the account has security.two_factor.enabled on, or when the caller enrolled. ' +
  'Refusals: 401 OTP_REQUIRED (no code), 401 OTP_INVALID (wrong, expired, or already used: a code counts ' +
  'once), 403 OTP_ENROLMENT_REQUIRED (the account requires two-factor and the caller has not enrolled).';

const Status = Type.Object({
  method: Type.Literal('totp'),
  enrolled: Type.Boolean({ description: 'A confirmed enrolment exists' }),
  pending: Type.Boolean({ description: 'An enrolment was started and awaits its first code' }),
  confirmedAt: Nullable(DateTime),
  backupCodesRemaining: Type.Integer(),
  requiredByAccount: Type.Boolean({ description: 'security.two_factor.enabled of the account' }),
  codeRequiredForSensitiveOperations: Type.Boolean(),
});

const BackupCodes = Type.Array(Type.String(), {
  description: 'Single-use backup codes, shown this once (each works once in X-Anvil-OTP)',
});

/** /v2/accounts/security/two-factor: the caller's own TOTP enrolment. */
export const twoFactorRoutes: FastifyPluginAsyncTypebox<{ context: AppContext }> = async (
  app,
  { context },
) => {
  const { enrolments, gate } = context.accounts.twoFactor;
  const config = { scope: 'accounts' as const };
  const base = '/v2/accounts/security/two-factor';

  app.get(
    base,
    {
      config,
      schema: {
        tags,
        summary: "The caller's two-factor enrolment",
        description: TWO_FACTOR_DESCRIPTION,
        response: { 200: Status, ...flatErrors(401, 403, 429) },
      },
    },
    async (request) => {
      const principal = request.principal!;
      const [status, rule] = await Promise.all([
        enrolments.status(principal.userId),
        gate.required(principal),
      ]);
      return {
        method: 'totp' as const,
        enrolled: status.enrolled,
        pending: status.pending,
        confirmedAt: status.confirmedAt?.toISOString() ?? null,
        backupCodesRemaining: status.backupCodesRemaining,
        requiredByAccount: rule.byAccount,
        codeRequiredForSensitiveOperations: rule.required,
      };
    },
  );

  app.post(
    `${base}/enrol`,
    {
      config,
      schema: {
        tags,
        summary: 'Start (or restart) a TOTP enrolment: a new secret, on once confirmed',
        description:
          `${TWO_FACTOR_DESCRIPTION} Restarting replaces a confirmed enrolment, so an enrolled member ` +
          'needs a current code (X-Anvil-OTP) for it.',
        response: {
          201: Type.Object({
            secret: Type.String({ description: 'Base32, for typing into an authenticator app' }),
            otpauthUri: Type.String({ description: 'otpauth://totp/... for a QR code' }),
            message: Type.String(),
          }),
          ...flatErrors(401, 403, 429),
        },
      },
    },
    async (request, reply) => {
      const principal = request.principal!;
      await gate.checkIfEnrolled(principal, request.headers[OTP_HEADER], 'two-factor re-enrolment');
      const started = await enrolments.start(principal);
      reply.code(201);
      return { ...started, message: 'add the secret to an authenticator app, then confirm with a code' };
    },
  );

  app.post(
    `${base}/confirm`,
    {
      config,
      schema: {
        tags,
        summary: 'Confirm the pending enrolment with a first code; answers the backup codes once',
        description: `${TWO_FACTOR_DESCRIPTION} 400 INVALID_STATE when no enrolment is pending.`,
        body: Type.Object(
          { code: Type.String({ pattern: '^[0-9]{6}$', description: 'The current 6-digit code' }) },
          { additionalProperties: false },
        ),
        response: {
          200: Type.Object({ enrolled: Type.Literal(true), backupCodes: BackupCodes }),
          ...flatErrors(400, 401, 403, 429),
        },
      },
    },
    async (request) => ({
      enrolled: true as const,
      backupCodes: await enrolments.confirm(request.principal!.userId, request.body.code),
    }),
  );

  app.post(
    `${base}/backup-codes`,
    {
      config: { ...config, sensitive: 'backup code regeneration' },
      schema: {
        tags,
        summary: 'New backup codes (the unused ones stop working)',
        description: TWO_FACTOR_DESCRIPTION,
        response: { 200: Type.Object({ backupCodes: BackupCodes }), ...flatErrors(400, 401, 403, 429) },
      },
    },
    async (request) => ({
      backupCodes: await enrolments.regenerateBackupCodes(request.principal!.userId),
    }),
  );

  app.delete(
    base,
    {
      config: { ...config, sensitive: 'two-factor removal' },
      schema: {
        tags,
        summary: "Remove the caller's enrolment (secret and backup codes)",
        description:
          `${TWO_FACTOR_DESCRIPTION} While the account requires two-factor, a member without an enrolment ` +
          'is refused every sensitive operation until they enrol again.',
        response: { 200: Type.Object({ removed: Type.Boolean() }), ...flatErrors(401, 403, 429) },
      },
    },
    async (request) => ({ removed: await enrolments.remove(request.principal!.userId) }),
  );
};
