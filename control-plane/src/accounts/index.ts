import type { AccessRevocations } from '../access-revocation/revocations.ts';
import type { ApiKeyService } from '../auth/api-keys.ts';
import type { Clock } from '../auth/clock.ts';
import type { KeyResolver } from '../auth/key-resolver.ts';
import { TwoFactorEnrolments } from '../auth/two-factor/enrolments.ts';
import { TwoFactorGate } from '../auth/two-factor/gate.ts';
import type { Config } from '../config.ts';
import { loadSecretBox, type SecretBox, type SecretKeySource } from '../crypto/secret-box.ts';
import type { Database } from '../db/index.ts';
import type { Logger } from '../logger.ts';
import { UsageRecords } from '../usage/records.ts';
import { AccessControl } from './access.ts';
import { ActivityTracker } from './activity.ts';
import { AuditLog } from './audit.ts';
import { ComputeHoursLimit } from './compute-hours.ts';
import { RoleService } from './custom-roles.ts';
import { GrantService } from './grants.ts';
import { InvitationService } from './invitations.ts';
import { MemberKeyPolicy } from './key-policy.ts';
import { NotificationTests } from './notification-test.ts';
import { Notifier } from './notifications.ts';
import { ProfileService } from './profile.ts';
import { ResourceDirectory } from './resources.ts';
import { SettingsService } from './settings.ts';
import { AccountIpPolicy } from './settings-ip-policy.ts';
import { SettingsTransfer } from './settings-transfer.ts';
import { ShareService } from './shares.ts';
import { TeamService } from './team.ts';
import { WebhookOutbox } from './webhook-outbox.ts';

export interface AccountServices {
  access: AccessControl;
  audit: AuditLog;
  activity: ActivityTracker;
  resources: ResourceDirectory;
  roles: RoleService;
  grants: GrantService;
  shares: ShareService;
  team: TeamService;
  invitations: InvitationService;
  profile: ProfileService;
  settings: SettingsService;
  /** Test deliveries to the notification channels of the settings. */
  notificationTests: NotificationTests;
  /** Export and import of the settings document. */
  settingsTransfer: SettingsTransfer;
  /** security.api_access.ip_whitelist as the API guard, proxy, SSH relay and terminal enforce it. */
  ipPolicy: AccountIpPolicy;
  /** The role limitation maxComputeHours: GPU-hours used this month and the check before new placement. */
  computeHours: ComputeHoursLimit;
  /** Members' TOTP enrolments and the check sensitive routes make (security.two_factor). */
  twoFactor: { enrolments: TwoFactorEnrolments; gate: TwoFactorGate };
  notifier: Notifier;
  /** Webhook events recorded with the changes they report, delivered with retries. */
  outbox: WebhookOutbox;
  /** The secret box, loaded on first use (creating <dataDir>/secret.key when no key is configured). */
  secrets(): SecretBox;
  secretKeySource(): { source: SecretKeySource; path: string | null };
  start(): Promise<void>;
  stop(): Promise<void>;
}

/** Builds the accounts domain: profile, team, roles and permissions, settings, and the access layer. */
export function createAccountServices(deps: {
  config: Config;
  db: Database;
  clock: Clock;
  keys: KeyResolver;
  apiKeys: ApiKeyService;
  revocations: AccessRevocations;
  logger: Logger;
}): AccountServices {
  const { config, db, clock, keys, apiKeys, revocations, logger } = deps;
  let loaded: ReturnType<typeof loadSecretBox> | null = null;
  const load = () => {
    loaded ??= loadSecretBox({
      secretKey: config.secretKey,
      previousSecretKeys: config.previousSecretKeys,
      dataDir: config.dataDir,
    });
    return loaded;
  };
  const audit = new AuditLog(db, clock);
  const access = new AccessControl(db, clock, audit);
  const activity = new ActivityTracker(db, clock);
  const notifier = new Notifier({
    smtpUrl: config.smtpUrl,
    smtpFrom: config.smtpFrom,
    allowPrivate: config.outboundAllowPrivate,
    clock,
  });
  const ipPolicy = new AccountIpPolicy(db);
  const enrolments = new TwoFactorEnrolments({ db, clock, secrets: () => load().box, issuer: 'Anvil' });
  const settings = new SettingsService({
    db,
    clock,
    access,
    audit,
    secrets: () => load().box,
    ipPolicy,
    twoFactor: enrolments,
  });
  const notificationTests = new NotificationTests({ db, clock, notifier, settings });
  const settingsTransfer = new SettingsTransfer({ clock, access, settings });
  const twoFactor = {
    enrolments,
    gate: new TwoFactorGate({
      enrolments,
      accountRequires: async (accountId) => settings.twoFactorRequired(accountId),
    }),
  };
  apiKeys.setPolicy(new MemberKeyPolicy(db, clock, access, settings));
  const outbox = new WebhookOutbox({
    db,
    settings,
    notifier,
    logger: logger.child({ component: 'webhook-outbox' }),
  });
  let pruneTimer: NodeJS.Timeout | null = null;
  const services: AccountServices = {
    access,
    audit,
    activity,
    notifier,
    outbox,
    settings,
    notificationTests,
    settingsTransfer,
    ipPolicy,
    twoFactor,
    computeHours: new ComputeHoursLimit({ records: new UsageRecords(db), clock, access }),
    resources: new ResourceDirectory(db, clock, access, activity),
    roles: new RoleService(db, clock, access, audit, keys, revocations),
    grants: new GrantService(db, clock, access, audit, revocations),
    shares: new ShareService(db, clock, access, audit, activity, revocations),
    team: new TeamService({
      db,
      clock,
      access,
      audit,
      keys,
      revocations,
      activity,
      publicUrl: config.publicUrl,
    }),
    invitations: new InvitationService({
      db,
      clock,
      access,
      audit,
      apiKeys,
      notifier,
      activity,
      publicUrl: config.publicUrl,
      logger,
    }),
    profile: new ProfileService({ db, clock, dataDir: config.dataDir, publicUrl: config.publicUrl }),
    secrets: () => load().box,
    secretKeySource: () => ({ source: load().source, path: load().path }),
    async start() {
      await ipPolicy.start();
      // Values sealed under a key now in ANVIL_SECRET_KEY_PREVIOUS move to the current key.
      if (config.previousSecretKeys.length > 0) {
        const resealed = await settings.reseal();
        if (resealed > 0)
          logger.info({ accounts: resealed }, 'settings secrets re-sealed under the current key');
        const members = await enrolments.reseal();
        if (members > 0) logger.info({ members }, 'two-factor secrets re-sealed under the current key');
      }
      await audit.prune();
      pruneTimer = setInterval(() => {
        audit.prune().catch((error: unknown) => logger.warn({ err: error }, 'audit retention purge failed'));
      }, 3_600_000);
      pruneTimer.unref();
      outbox.start();
    },
    async stop() {
      if (pruneTimer) clearInterval(pruneTimer);
      await ipPolicy.stop();
      await outbox.stop();
      notifier.close();
    },
  };
  return services;
}
