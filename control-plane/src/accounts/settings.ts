import { ApiError, type KeyScope } from '@anvil/shared';
import { Ajv, type ValidateFunction } from 'ajv';
import addFormats from 'ajv-formats';
import type { Clock } from '../auth/clock.ts';
import { SecretBox } from '../crypto/secret-box.ts';
import type { Prisma } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import { IpRules } from '../proxy/ip-rules.ts';
import { GPU_TYPES, REGIONS } from '../scheduler/gpu-types.ts';
import { type AccessControl, type Actor, holds, type MemberAccess } from './access.ts';
import type { AuditLog } from './audit.ts';
import { GITHUB_USERNAME } from './profile.ts';
import type { RolePermission, RoleScope } from './roles.ts';
import { type AccountIpPolicy, enforcedList } from './settings-ip-policy.ts';
import { dropRefused, refuseUnsupported, withRefusedShownAsDefault } from './settings-refused.ts';
import {
  defaultSettings,
  MASK,
  READ_ONLY_PATHS,
  SECTION_NAMES,
  SECTION_SCHEMAS,
  type SectionName,
  type ShortSettingsInput,
} from './settings-schema.ts';
import { checkCountry, checkHttpUrl, checkIpList, checkTimeZone, validationError } from './validation.ts';

type Json = Record<string, unknown>;

/** Who reads and who changes each section. Billing also needs an API key with the billing scope. */
export const SECTION_ACCESS: Record<
  SectionName,
  { scope: RoleScope; write: RolePermission; keyScope?: KeyScope }
> = {
  notifications: { scope: 'accounts', write: 'write' },
  billing: { scope: 'billing', write: 'manage_billing', keyScope: 'billing' },
  security: { scope: 'security', write: 'manage_security' },
  integrations: { scope: 'integrations', write: 'manage_integrations' },
  preferences: { scope: 'accounts', write: 'write' },
};

/** Fields stored sealed (AES-256-GCM) and masked when read; `*` walks an array. */
const SECRET_PATHS: string[][] = [
  ['notifications', 'webhook', 'secret'],
  ['notifications', 'slack', 'webhook_url'],
  ['integrations', 'github', 'access_token'],
  ['integrations', 'monitoring', 'datadog', 'api_key'],
  ['integrations', 'docker', 'registries', '*', 'access_token'],
  ['security', 'two_factor', 'backup_codes'],
];

export const SETTINGS_FORMAT_VERSION = '2.0';
export const MERGE_STRATEGIES = ['merge', 'overwrite'] as const;
export type MergeStrategy = (typeof MERGE_STRATEGIES)[number];

const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

const clone = <T>(value: T): T => structuredClone(value);

/** Objects merge key by key; arrays, scalars and null replace. */
export function deepMerge(base: unknown, patch: unknown): unknown {
  if (!isObject(base) || !isObject(patch)) return clone(patch);
  const out: Json = clone(base);
  for (const [key, value] of Object.entries(patch)) {
    if (value === undefined) continue;
    out[key] = key in out ? deepMerge(out[key], value) : clone(value);
  }
  return out;
}

/** Applies `fn` to every secret field present in a settings document; returns a new document. */
function mapSecrets(doc: Json, fn: (value: unknown, key: string) => unknown): Json {
  const out = clone(doc);
  const walk = (node: unknown, path: string[], key: string[]) => {
    if (path.length === 0 || node === null || typeof node !== 'object') return;
    const [head, ...rest] = path as [string, ...string[]];
    if (head === '*') {
      if (Array.isArray(node)) for (const item of node) walk(item, rest, key);
      return;
    }
    const holder = node as Json;
    if (!(head in holder)) return;
    if (rest.length === 0) {
      const value = holder[head];
      if (value !== null && value !== undefined) holder[head] = fn(value, [...key, head].join('.'));
      return;
    }
    walk(holder[head], rest, [...key, head]);
  };
  for (const path of SECRET_PATHS) walk(out, path, []);
  return out;
}

function flatten(value: unknown, prefix: string, out: Map<string, string>): Map<string, string> {
  if (isObject(value)) {
    for (const [key, child] of Object.entries(value)) flatten(child, prefix ? `${prefix}.${key}` : key, out);
  } else {
    out.set(prefix, JSON.stringify(value));
  }
  return out;
}

/** The value at `path` in a settings document, undefined where any step is missing. */
export function get(doc: unknown, path: string[]): unknown {
  let node = doc;
  for (const key of path) {
    if (!isObject(node)) return undefined;
    node = node[key];
  }
  return node;
}

function ajvField(error: { instancePath?: string; params?: Record<string, unknown> }): string {
  const path = (error.instancePath ?? '').replace(/^\//, '').replaceAll('/', '.');
  const leaf = (error.params?.['missingProperty'] ?? error.params?.['additionalProperty']) as
    | string
    | undefined;
  return [path, leaf].filter(Boolean).join('.');
}

/**
 * Account settings: one JSON document per account holding only what was set (defaults fill the rest),
 * with secret fields sealed under the secret box. Every section is validated in full on every change:
 * the schema (types, enums, ranges), then what a schema cannot say (IANA time zones, ISO country codes,
 * CIDR lists, URLs, fields an enabled switch needs).
 */
export class SettingsService {
  private readonly validators: Record<SectionName, ValidateFunction>;

  constructor(
    private readonly deps: {
      db: Database;
      clock: Clock;
      access: AccessControl;
      audit: AuditLog;
      secrets: () => SecretBox;
      ipPolicy: AccountIpPolicy;
      /** Members' two-factor enrolments: turning two_factor on needs the caller enrolled. */
      twoFactor: {
        confirmed(userId: string): Promise<boolean>;
        status(userId: string): Promise<{ backupCodesRemaining: number }>;
      };
    },
  ) {
    const ajv = addFormats.default(
      new Ajv({
        removeAdditional: false,
        useDefaults: true,
        allErrors: false,
        strict: false,
        coerceTypes: false,
      }),
    );
    this.validators = Object.fromEntries(
      SECTION_NAMES.map((name) => [name, ajv.compile(SECTION_SCHEMAS[name] as object)]),
    ) as Record<SectionName, ValidateFunction>;
  }

  // ---- storage ----

  private async ownerEmail(accountId: string): Promise<string | null> {
    const owner = await this.deps.db.prisma.user.findFirst({
      where: { accountId, role: 'owner' },
      orderBy: { createdAt: 'asc' },
      select: { email: true },
    });
    return owner?.email ?? null;
  }

  /** Stored overrides with secrets opened. */
  private async loadPlain(accountId: string): Promise<{ data: Json; updatedAt: Date | null }> {
    const row = await this.deps.db.prisma.accountSettings.findUnique({ where: { accountId } });
    if (!row) return { data: {}, updatedAt: null };
    return { data: this.open(accountId, row.data as Json), updatedAt: row.updatedAt };
  }

  private open(accountId: string, sealed: Json): Json {
    const box = this.deps.secrets();
    return mapSecrets(sealed, (value, key) => {
      if (!SecretBox.isSealed(value)) return value;
      const text = box.open(value, `${accountId}:${key}`);
      return key === 'security.two_factor.backup_codes' ? JSON.parse(text) : text;
    });
  }

  private seal(accountId: string, plain: Json): Json {
    const box = this.deps.secrets();
    return mapSecrets(plain, (value, key) =>
      box.seal(typeof value === 'string' ? value : JSON.stringify(value), `${accountId}:${key}`),
    );
  }

  private async save(accountId: string, plain: Json, actorId: string | null): Promise<Date> {
    const now = this.deps.clock.now();
    const data = this.seal(accountId, plain) as Prisma.InputJsonValue;
    await this.deps.db.prisma.accountSettings.upsert({
      where: { accountId },
      create: { accountId, data, updatedAt: now, updatedById: actorId },
      update: { data, updatedAt: now, updatedById: actorId },
    });
    return now;
  }

  /** Effective settings (defaults + overrides), plain: for the domain's own use (limits, deliveries). */
  async effective(accountId: string): Promise<Record<SectionName, Json>> {
    const [{ data }, email] = await Promise.all([this.loadPlain(accountId), this.ownerEmail(accountId)]);
    const defaults = defaultSettings(email);
    // Values stored before a field was refused are neither shown nor acted on.
    return withRefusedShownAsDefault(deepMerge(defaults, data) as Json, defaults) as Record<
      SectionName,
      Json
    >;
  }

  /** A section as read: its secrets masked. */
  masked(section: Json, sectionName: SectionName): Json {
    const wrapped = mapSecrets({ [sectionName]: section }, (value) =>
      Array.isArray(value) ? value.map(() => MASK) : MASK,
    );
    return wrapped[sectionName] as Json;
  }

  // ---- access ----

  /** Whether the caller may read `section` (its role, and the API key's scope for billing). */
  readable(member: MemberAccess, actor: Actor, section: SectionName): boolean {
    const rule = SECTION_ACCESS[section];
    if (rule.keyScope && !actor.principal.scopes.includes(rule.keyScope)) return false;
    return holds(member, 'read', rule.scope) !== null;
  }

  /** The caller, when it may read `section`. */
  async requireRead(actor: Actor, section: SectionName): Promise<MemberAccess> {
    const rule = SECTION_ACCESS[section];
    return this.deps.access.require(actor, {
      permission: 'read',
      scope: rule.scope,
      keyScope: rule.keyScope,
      action: `settings_${section}_read_attempt`,
    });
  }

  /** The caller, when it may change `section` (also asked by the notification test, notification-test.ts). */
  async requireWrite(actor: Actor, section: SectionName): Promise<MemberAccess> {
    const rule = SECTION_ACCESS[section];
    return this.deps.access.require(actor, {
      permission: rule.write,
      scope: rule.scope,
      keyScope: rule.keyScope,
      action: `settings_${section}_update_attempt`,
    });
  }

  // ---- reading ----

  async getAll(actor: Actor) {
    const member = await this.deps.access.caller(actor);
    const all = await this.effective(member.accountId);
    const { updatedAt } = await this.loadPlain(member.accountId);
    const settings: Json = {};
    const restricted: string[] = [];
    for (const name of SECTION_NAMES) {
      if (this.readable(member, actor, name))
        settings[name] = await this.withOwnBackupCodes(member, name, this.masked(all[name], name));
      else restricted.push(name);
    }
    return { settings, restricted, updatedAt: updatedAt ? updatedAt.toISOString() : null };
  }

  async getSection(actor: Actor, section: SectionName) {
    const member = await this.requireRead(actor, section);
    const all = await this.effective(member.accountId);
    return this.withOwnBackupCodes(member, section, this.masked(all[section], section));
  }

  /** security.two_factor.backup_codes reads as the caller's own unused codes, masked. */
  private async withOwnBackupCodes(member: MemberAccess, section: SectionName, view: Json): Promise<Json> {
    if (section !== 'security' || !isObject(view['two_factor'])) return view;
    const { backupCodesRemaining } = await this.deps.twoFactor.status(member.userId);
    (view['two_factor'] as Json)['backup_codes'] = Array(backupCodesRemaining).fill(MASK);
    return view;
  }

  /** Turning two-factor on for the account needs the caller enrolled, so it cannot lock them out. */
  private async requireEnrolledToEnable(member: MemberAccess): Promise<void> {
    if (await this.deps.twoFactor.confirmed(member.userId)) return;
    throw new ApiError(
      'OTP_ENROLMENT_REQUIRED',
      'enrol in two-factor yourself before turning it on for the account ' +
        '(POST /v2/accounts/security/two-factor/enrol, then .../confirm with a code)',
      { field: 'two_factor.enabled' },
    );
  }

  /** Whether security.two_factor.enabled is on: sensitive operations then need a code. */
  async twoFactorRequired(accountId: string): Promise<boolean> {
    const all = await this.effective(accountId);
    return get(all.security, ['two_factor', 'enabled']) === true;
  }

  // ---- changing ----

  /**
   * The section's new stored overrides after an update: read-only fields dropped, masked secrets kept,
   * merged (or replacing, for overwrite), then checked in full. Throws VALIDATION_ERROR with the field
   * relative to the section.
   */
  private nextSection(
    section: SectionName,
    current: Json,
    input: Json,
    strategy: MergeStrategy,
    ownerEmail: string | null,
  ): { overrides: Json; enablesTwoFactor: boolean } {
    refuseUnsupported(section, input, defaultSettings(ownerEmail)[section]);
    const given = clone(input);
    for (const path of READ_ONLY_PATHS) {
      if (path[0] !== section) continue;
      let node: unknown = given;
      for (const key of path.slice(1, -1)) node = isObject(node) ? node[key] : undefined;
      if (isObject(node)) delete node[path[path.length - 1]!];
    }
    // "********" sent back for a secret keeps the stored value.
    const keepMasked = mapSecrets({ [section]: given }, (value, key) => {
      if (value !== MASK) return value;
      if (key === 'integrations.docker.registries.access_token') return value;
      return get({ [section]: current }, key.split('.')) ?? null;
    })[section] as Json;
    if (section === 'integrations') {
      const registries = get(keepMasked, ['docker', 'registries']);
      const before = (get(current, ['docker', 'registries']) as Json[] | undefined) ?? [];
      if (Array.isArray(registries)) {
        for (const registry of registries as Json[]) {
          if (registry['access_token'] === MASK) {
            registry['access_token'] =
              before.find((r) => r['url'] === registry['url'])?.['access_token'] ?? null;
          }
        }
      }
    }
    const overrides = dropRefused(
      section,
      (strategy === 'merge' ? deepMerge(current, keepMasked) : keepMasked) as Json,
    );
    const view = deepMerge(defaultSettings(ownerEmail)[section], overrides) as Json;
    let enablesTwoFactor = false;
    if (section === 'security') {
      // Backup codes are each member's own now (issued when they confirm a TOTP enrolment, kept hashed):
      // account-wide codes from before are dropped.
      if (isObject(overrides['two_factor'])) delete (overrides['two_factor'] as Json)['backup_codes'];
      enablesTwoFactor =
        get(view, ['two_factor', 'enabled']) === true && get(current, ['two_factor', 'enabled']) !== true;
    }
    this.check(section, view, overrides);
    return { overrides, enablesTwoFactor };
  }

  /** What schemas cannot say; canonical values (time zones) are written back into `overrides`. */
  private check(section: SectionName, view: Json, overrides: Json): void {
    const setCanonical = (path: string[], value: unknown) => {
      let node: Json = overrides;
      for (const key of path.slice(0, -1)) {
        if (!isObject(node[key])) return;
        node = node[key] as Json;
      }
      if (path[path.length - 1]! in node) node[path[path.length - 1]!] = value;
    };
    const url = (path: string[], required: boolean, reason: string) => {
      const value = get(view, path);
      if (value === null || value === undefined || value === '') {
        if (required) throw validationError(path.join('.'), reason);
        return;
      }
      checkHttpUrl(String(value), path.join('.'));
    };
    switch (section) {
      case 'notifications': {
        url(
          ['slack', 'webhook_url'],
          get(view, ['slack', 'enabled']) === true,
          'is required when slack is enabled',
        );
        url(
          ['webhook', 'url'],
          get(view, ['webhook', 'enabled']) === true,
          'is required when the webhook is enabled',
        );
        break;
      }
      case 'billing': {
        setCanonical(['timezone'], checkTimeZone(String(get(view, ['timezone'])), 'timezone'));
        const country = get(view, ['billing_address', 'country']);
        if (country !== null && country !== undefined)
          checkCountry(String(country), 'billing_address.country');
        if (
          get(view, ['auto_recharge', 'enabled']) === true &&
          !((get(view, ['auto_recharge', 'amount']) as number) > 0)
        ) {
          throw validationError('auto_recharge.amount', 'must be above 0 when auto_recharge is enabled');
        }
        break;
      }
      case 'security': {
        if (get(view, ['two_factor', 'method']) === 'sms') {
          throw new ApiError(
            'NOT_SUPPORTED',
            'two_factor.method sms is not supported: Anvil sends no text messages; use totp (an authenticator app)',
            { field: 'two_factor.method', value: 'sms' },
          );
        }
        const list = (get(view, ['api_access', 'ip_whitelist']) as string[]) ?? [];
        checkIpList(list, 'api_access.ip_whitelist');
        if (get(view, ['api_access', 'require_ip_whitelist']) === true && list.length === 0) {
          throw validationError(
            'api_access.require_ip_whitelist',
            'needs a non-empty ip_whitelist (an empty list would refuse every request)',
          );
        }
        break;
      }
      case 'integrations': {
        const username = get(view, ['github', 'username']);
        if (typeof username === 'string' && !GITHUB_USERNAME.test(username)) {
          throw validationError(
            'github.username',
            'must be a GitHub username: 1-39 letters, digits or single hyphens',
          );
        }
        if (get(view, ['github', 'enabled']) === true && !get(view, ['github', 'access_token'])) {
          throw validationError('github.access_token', 'is required when github is enabled');
        }
        const registries = (get(view, ['docker', 'registries']) as Json[]) ?? [];
        registries.forEach((registry, index) => {
          const value = String(registry['url']);
          const ok = /^https?:\/\//.test(value)
            ? (() => {
                try {
                  checkHttpUrl(value, 'x');
                  return true;
                } catch {
                  return false;
                }
              })()
            : /^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:\d{1,5})?(\/[a-z0-9._/-]*)?$/i.test(value);
          if (!ok) {
            throw validationError(
              `docker.registries.${index}.url`,
              'must be a registry host[:port][/path] or an https URL',
            );
          }
        });
        if (
          get(view, ['monitoring', 'datadog', 'enabled']) === true &&
          !get(view, ['monitoring', 'datadog', 'api_key'])
        ) {
          throw validationError('monitoring.datadog.api_key', 'is required when datadog is enabled');
        }
        url(
          ['monitoring', 'grafana', 'url'],
          get(view, ['monitoring', 'grafana', 'enabled']) === true,
          'is required when grafana is enabled',
        );
        break;
      }
      case 'preferences': {
        setCanonical(['timezone'], checkTimeZone(String(get(view, ['timezone'])), 'timezone'));
        // A default a create could not use would be inert: only known types and regions.
        const gpuType = get(view, ['default_gpu_type']);
        if (typeof gpuType === 'string' && !(GPU_TYPES as readonly string[]).includes(gpuType)) {
          throw validationError('default_gpu_type', `must be one of ${GPU_TYPES.join(', ')} (or null)`);
        }
        const region = get(view, ['default_region']);
        if (typeof region === 'string' && !(REGIONS as readonly string[]).includes(region)) {
          throw validationError('default_region', `must be one of ${REGIONS.join(', ')} (or null)`);
        }
        break;
      }
    }
  }

  /**
   * Lock-out protection: a change that puts an address allowlist in force (or changes the one in force)
   * without the caller's own address is refused unless the caller confirms it (confirm_lockout=true).
   */
  private refuseLockout(actor: Actor, before: Json, after: Json, confirmed: boolean): void {
    const list = enforcedList(after);
    if (list === null || confirmed) return;
    const prior = enforcedList(before);
    if (prior !== null && JSON.stringify(prior) === JSON.stringify(list)) return;
    if (actor.ip !== null && new IpRules(list).matches(actor.ip)) return;
    throw new ApiError(
      'CONFIRMATION_REQUIRED',
      `this ip_whitelist would refuse your own address ${actor.ip ?? '(unknown)'}: add it, or repeat the ` +
        'request with confirm_lockout=true to lock yourself out',
      {
        field: 'security.api_access.ip_whitelist',
        caller_ip: actor.ip,
        required_field: 'confirm_lockout',
        required_value: true,
      },
    );
  }

  async updateSection(
    actor: Actor,
    section: SectionName,
    input: Json,
    options: { confirmLockout?: boolean | undefined } = {},
  ) {
    const member = await this.requireWrite(actor, section);
    const [{ data }, email] = await Promise.all([
      this.loadPlain(member.accountId),
      this.ownerEmail(member.accountId),
    ]);
    const { overrides, enablesTwoFactor } = this.nextSection(
      section,
      (data[section] as Json) ?? {},
      input,
      'merge',
      email,
    );
    if (enablesTwoFactor) await this.requireEnrolledToEnable(member);
    const next = { ...data, [section]: overrides };
    if (section === 'security') this.refuseLockout(actor, data, next, options.confirmLockout === true);
    const updatedAt = await this.save(member.accountId, next, member.userId);
    if (section === 'security') await this.deps.ipPolicy.changed(member.accountId);
    await this.auditChange(actor, member, [section], data, next);
    const view = await this.withOwnBackupCodes(
      member,
      section,
      this.masked(deepMerge(defaultSettings(email)[section], overrides) as Json, section),
    );
    return { section: view, updatedAt: updatedAt.toISOString() };
  }

  /** The short form: notifications switches, 2FA and session timeout, default GPU type and region. */
  async updateShort(actor: Actor, input: ShortSettingsInput) {
    const patches: Partial<Record<SectionName, Json>> = {};
    if (input.notifications) {
      const n = input.notifications;
      patches.notifications = {
        ...(n.email !== undefined ? { email: { enabled: n.email } } : {}),
        ...(n.slack !== undefined ? { slack: { enabled: n.slack } } : {}),
        ...(n.webhook !== undefined ? { webhook: { enabled: n.webhook } } : {}),
      };
    }
    if (input.security) {
      const s = input.security;
      patches.security = {
        ...(s.twoFactorAuth !== undefined ? { two_factor: { enabled: s.twoFactorAuth } } : {}),
        ...(s.sessionTimeout !== undefined ? { session: { timeout: s.sessionTimeout } } : {}),
      };
    }
    if (input.defaults) {
      const d = input.defaults;
      patches.preferences = {
        ...(d.defaultGpuType !== undefined ? { default_gpu_type: d.defaultGpuType } : {}),
        ...(d.defaultRegion !== undefined ? { default_region: d.defaultRegion } : {}),
      };
    }
    const result = await this.applyMany(actor, patches, 'merge', { validateOnly: false });
    return {
      message:
        result.sections.length > 0 ? `settings updated: ${result.sections.join(', ')}` : 'nothing to update',
      updatedAt: result.updatedAt ?? this.deps.clock.now().toISOString(),
      sections: result.sections,
    };
  }

  /**
   * Validates every section first (schema, then domain), then writes them all at once (the short form's
   * update and an import, settings-transfer.ts).
   */
  async applyMany(
    actor: Actor,
    patches: Partial<Record<SectionName, Json>>,
    strategy: MergeStrategy,
    options: { validateOnly: boolean; confirmLockout?: boolean | undefined },
    fieldPrefix = '',
  ) {
    const validateOnly = options.validateOnly;
    const names = SECTION_NAMES.filter((name) => patches[name] !== undefined);
    let member: MemberAccess | null = null;
    for (const name of names) member = await this.requireWrite(actor, name);
    member ??= await this.deps.access.caller(actor);
    const [{ data }, email] = await Promise.all([
      this.loadPlain(member.accountId),
      this.ownerEmail(member.accountId),
    ]);
    const next: Json = { ...data };
    let enablesTwoFactor = false;
    for (const name of names) {
      const input = clone(patches[name]!);
      const validate = this.validators[name];
      if (!validate(input)) {
        const error: {
          keyword?: string;
          message?: string;
          instancePath?: string;
          params?: Record<string, unknown>;
        } = validate.errors?.[0] ?? {};
        const inner = ajvField(error);
        const reason =
          error.keyword === 'additionalProperties'
            ? 'is not an allowed field'
            : (error.message ?? 'is invalid');
        const field = [fieldPrefix + name, inner].filter(Boolean).join('.');
        throw validationError(field, reason, { section: name });
      }
      try {
        const out = this.nextSection(name, (data[name] as Json) ?? {}, input as Json, strategy, email);
        next[name] = out.overrides;
        enablesTwoFactor ||= out.enablesTwoFactor;
      } catch (error) {
        if (error instanceof ApiError && error.code === 'VALIDATION_ERROR' && error.details) {
          const field = `${fieldPrefix}${name}.${String(error.details['field'])}`;
          throw validationError(field, String(error.details['reason']), { section: name });
        }
        if (error instanceof ApiError && error.code === 'NOT_SUPPORTED' && error.details) {
          const field = `${fieldPrefix}${name}.${String(error.details['field'])}`;
          throw new ApiError('NOT_SUPPORTED', `${fieldPrefix}${error.message}`, { ...error.details, field });
        }
        throw error;
      }
    }
    if (enablesTwoFactor && !validateOnly) await this.requireEnrolledToEnable(member);
    const before = deepMerge(defaultSettings(email), data) as Json;
    const after = deepMerge(defaultSettings(email), next) as Json;
    const changes = names.map((name) => {
      const a = flatten(before[name], '', new Map());
      const b = flatten(after[name], '', new Map());
      const fields = [...new Set([...a.keys(), ...b.keys()])]
        .filter((key) => a.get(key) !== b.get(key))
        .sort();
      return { section: name, fields };
    });
    if (names.includes('security')) this.refuseLockout(actor, data, next, options.confirmLockout === true);
    let updatedAt: string | null = null;
    if (!validateOnly && names.length > 0) {
      updatedAt = (await this.save(member.accountId, next, member.userId)).toISOString();
      if (names.includes('security')) await this.deps.ipPolicy.changed(member.accountId);
      await this.auditChange(actor, member, names, data, next);
    }
    return { sections: names, changes, updatedAt };
  }

  private async auditChange(
    actor: Actor,
    member: MemberAccess,
    sections: SectionName[],
    before: Json,
    after: Json,
  ) {
    if (!sections.includes('security')) return;
    const a = flatten(before['security'] ?? {}, '', new Map());
    const b = flatten(after['security'] ?? {}, '', new Map());
    const fields = [...new Set([...a.keys(), ...b.keys()])].filter(
      (k) => a.get(k) !== b.get(k) && !k.includes('backup_codes'),
    );
    if (fields.length === 0) return;
    await this.deps.audit.record({
      accountId: member.accountId,
      type: 'permission_change',
      action: 'security_settings_updated',
      actor: { userId: member.userId, ip: actor.ip },
      details: { fields },
    });
  }

  /** What a create that omits them uses: preferences.default_region and default_gpu_type (null: unset). */
  async createDefaults(accountId: string): Promise<{ region: string | null; gpuType: string | null }> {
    const row = await this.deps.db.prisma.accountSettings.findUnique({
      where: { accountId },
      select: { data: true },
    });
    const preferences = (isObject(row?.data) ? (row.data as Json)['preferences'] : undefined) as
      | Json
      | undefined;
    // A value stored before only known ones were accepted is not used.
    const known = (value: unknown, values: readonly string[]) =>
      typeof value === 'string' && values.includes(value) ? value : null;
    return {
      region: known(preferences?.['default_region'], REGIONS),
      gpuType: known(preferences?.['default_gpu_type'], GPU_TYPES),
    };
  }

  /** The account's limit on active keys per member (security.api_access.max_api_keys). */
  async maxApiKeys(accountId: string): Promise<number> {
    const all = await this.effective(accountId);
    return Number(get(all.security, ['api_access', 'max_api_keys']) ?? 25);
  }

  /** Seals values still under a previous ANVIL_SECRET_KEY with the current one (key rotation). */
  async reseal(): Promise<number> {
    const box = this.deps.secrets();
    const rows = await this.deps.db.prisma.accountSettings.findMany();
    let changed = 0;
    for (const row of rows) {
      let stale = false;
      mapSecrets(row.data as Json, (value) => {
        if (SecretBox.isSealed(value) && box.needsReseal(value)) stale = true;
        return value;
      });
      if (!stale) continue;
      const plain = this.open(row.accountId, row.data as Json);
      await this.deps.db.prisma.accountSettings.update({
        where: { accountId: row.accountId },
        data: { data: this.seal(row.accountId, plain) as Prisma.InputJsonValue },
      });
      changed += 1;
    }
    return changed;
  }
}
