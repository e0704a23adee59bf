import type { Clock } from '../auth/clock.ts';
import type { AccessControl, Actor } from './access.ts';
import {
  MERGE_STRATEGIES,
  type MergeStrategy,
  SETTINGS_FORMAT_VERSION,
  type SettingsService,
} from './settings.ts';
import { SECTION_NAMES, type SectionName } from './settings-schema.ts';
import { validationError } from './validation.ts';

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/**
 * The settings document carried out of and into an account: export (the sections the caller reads,
 * secrets masked unless a security manager asks for them) and import (validated in full through the
 * settings service before anything is written).
 */
export class SettingsTransfer {
  constructor(
    private readonly deps: {
      clock: Clock;
      access: Pick<AccessControl, 'caller' | 'require'>;
      settings: Pick<SettingsService, 'requireRead' | 'readable' | 'effective' | 'masked' | 'applyMany'>;
    },
  ) {}

  async export(
    actor: Actor,
    options: { format: 'json' | 'yaml'; includeSecrets: boolean; sections?: string[] | undefined },
  ) {
    const member = await this.deps.access.caller(actor);
    let names: SectionName[];
    if (options.sections && options.sections.length > 0) {
      const unknown = options.sections.filter((s) => !(SECTION_NAMES as string[]).includes(s));
      if (unknown.length > 0) {
        throw validationError(
          'sections',
          `unknown section ${unknown.join(', ')}; sections: ${SECTION_NAMES.join(', ')}`,
        );
      }
      names = [...new Set(options.sections)] as SectionName[];
      for (const name of names) await this.deps.settings.requireRead(actor, name);
    } else {
      names = SECTION_NAMES.filter((name) => this.deps.settings.readable(member, actor, name));
    }
    if (options.includeSecrets) {
      await this.deps.access.require(actor, {
        permission: 'manage_security',
        scope: 'security',
        action: 'export_secrets_attempt',
      });
    }
    const all = await this.deps.settings.effective(member.accountId);
    const settings: Json = {};
    for (const name of names)
      settings[name] = options.includeSecrets ? all[name] : this.deps.settings.masked(all[name], name);
    return {
      export: {
        timestamp: this.deps.clock.now().toISOString(),
        format: options.format,
        include_secrets: options.includeSecrets,
        settings,
        metadata: {
          version: SETTINGS_FORMAT_VERSION,
          account_id: member.accountId,
          exported_by: member.userId,
        },
      },
    };
  }

  /**
   * Imports sections (from an export or by hand). `merge` changes the fields given; `overwrite`
   * replaces each given section (unset fields return to their defaults). Everything is validated before
   * anything is written; with validate_only nothing is written. Masked secrets keep the stored values.
   */
  async import(
    actor: Actor,
    input: {
      settings: Json;
      merge_strategy?: string | undefined;
      validate_only?: boolean | undefined;
      version?: string | undefined;
      confirm_lockout?: boolean | undefined;
    },
  ) {
    const strategy = (input.merge_strategy ?? 'merge') as MergeStrategy;
    if (!(MERGE_STRATEGIES as readonly string[]).includes(strategy)) {
      throw validationError('merge_strategy', `must be one of ${MERGE_STRATEGIES.join(', ')}`);
    }
    if (input.version !== undefined && input.version !== SETTINGS_FORMAT_VERSION) {
      throw validationError('metadata.version', `must be ${SETTINGS_FORMAT_VERSION}`);
    }
    const unknown = Object.keys(input.settings).filter((key) => !(SECTION_NAMES as string[]).includes(key));
    if (unknown.length > 0) {
      throw validationError(
        `settings.${unknown[0]}`,
        `is not a settings section (${SECTION_NAMES.join(', ')})`,
      );
    }
    const patches: Partial<Record<SectionName, Json>> = {};
    for (const [key, value] of Object.entries(input.settings)) {
      if (!isObject(value)) throw validationError(`settings.${key}`, 'must be an object');
      patches[key as SectionName] = value;
    }
    if (Object.keys(patches).length === 0) throw validationError('settings', 'names no section to import');
    const validateOnly = input.validate_only ?? false;
    const result = await this.deps.settings.applyMany(
      actor,
      patches,
      strategy,
      { validateOnly, confirmLockout: input.confirm_lockout },
      'settings.',
    );
    return {
      valid: true,
      validate_only: validateOnly,
      merge_strategy: strategy,
      applied: !validateOnly,
      sections: result.sections,
      changes: result.changes,
      updatedAt: result.updatedAt,
      message: validateOnly
        ? `valid: ${result.sections.length} section(s) would change as listed`
        : `imported ${result.sections.length} section(s)`,
    };
  }
}
