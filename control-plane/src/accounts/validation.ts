import { isIP } from 'node:net';
import { ApiError } from '@anvil/shared';
import { ROLE_PERMISSIONS, ROLE_SCOPES } from './roles.ts';

/** Checks that the domain layer makes beyond what the route schemas already enforce (shapes, lengths). */

export function validationError(
  field: string,
  reason: string,
  extra: Record<string, unknown> = {},
): ApiError {
  return new ApiError('VALIDATION_ERROR', `${field} ${reason}`, { field, reason, ...extra });
}

export function checkPermissions(
  permissions: string[],
  valid: readonly string[] = ROLE_PERMISSIONS,
): string[] {
  const invalid = permissions.filter((p) => !valid.includes(p));
  if (invalid.length > 0) {
    throw new ApiError('INVALID_PERMISSION', `unknown permission: ${invalid.join(', ')}`, {
      invalidPermissions: invalid,
      validPermissions: [...valid],
    });
  }
  return [...new Set(permissions)];
}

export function checkScopes(scopes: string[], valid: readonly string[] = ROLE_SCOPES): string[] {
  const invalid = scopes.filter((s) => !valid.includes(s));
  if (invalid.length > 0) {
    throw new ApiError('INVALID_SCOPE', `unknown scope: ${invalid.join(', ')}`, {
      invalidScopes: invalid,
      validScopes: [...valid],
    });
  }
  return [...new Set(scopes)];
}

// One @, no spaces, a dot in the domain, labels of letters, digits and hyphens: what deliverable
// addresses look like (RFC 5322's full grammar admits far more, none of it useful here).
const EMAIL =
  /^[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}@(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+$/;

/** A normalised e-mail address (domain lower-cased), or 400 INVALID_EMAIL. */
export function checkEmail(value: string, field = 'email'): string {
  const trimmed = value.trim();
  if (!EMAIL.test(trimmed) || trimmed.includes('..')) {
    throw new ApiError('INVALID_EMAIL', `not a valid e-mail address: ${JSON.stringify(value)}`, {
      field,
      value,
    });
  }
  const at = trimmed.lastIndexOf('@');
  return `${trimmed.slice(0, at)}@${trimmed.slice(at + 1).toLowerCase()}`;
}

/** An absolute http(s) URL, or VALIDATION_ERROR on the field. */
export function checkHttpUrl(value: string, field: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw validationError(field, 'must be an absolute http or https URL');
  }
  if ((url.protocol !== 'http:' && url.protocol !== 'https:') || !url.hostname) {
    throw validationError(field, 'must be an absolute http or https URL');
  }
  return value;
}

/**
 * An IANA time zone name. The names come from the runtime's time zone database:
 * Intl.supportedValuesOf('timeZone') plus UTC, matched regardless of case (`utc` → `UTC`), and the
 * other names Intl.DateTimeFormat accepts (Etc/*, current names such as Asia/Kolkata whose older alias
 * the list carries), kept as written. Offsets like "+02:00" are refused.
 */
export function checkTimeZone(value: string, field: string): string {
  const known = timeZones();
  const exact = known.get(value.toLowerCase());
  if (exact) return exact;
  if (/^[A-Za-z][A-Za-z0-9_+-]*(\/[A-Za-z0-9_+-]+){1,2}$/.test(value)) {
    try {
      new Intl.DateTimeFormat('en-US', { timeZone: value });
      return value;
    } catch {
      // not a zone: reported below
    }
  }
  throw validationError(field, 'must be an IANA time zone name such as Europe/Berlin or UTC');
}

let zoneCache: Map<string, string> | null = null;
function timeZones(): Map<string, string> {
  zoneCache ??= new Map(
    [...Intl.supportedValuesOf('timeZone'), 'UTC'].map((zone) => [zone.toLowerCase(), zone]),
  );
  return zoneCache;
}

/** ISO 3166-1 alpha-2 codes of the 249 assigned countries and territories. */
export const ISO_COUNTRIES = new Set(
  (
    'AD AE AF AG AI AL AM AO AQ AR AS AT AU AW AX AZ BA BB BD BE BF BG BH BI BJ BL BM BN BO BQ BR BS BT BV ' +
    'BW BY BZ CA CC CD CF CG CH CI CK CL CM CN CO CR CU CV CW CX CY CZ DE DJ DK DM DO DZ EC EE EG EH ER ES ' +
    'ET FI FJ FK FM FO FR GA GB GD GE GF GG GH GI GL GM GN GP GQ GR GS GT GU GW GY HK HM HN HR HT HU ID IE ' +
    'IL IM IN IO IQ IR IS IT JE JM JO JP KE KG KH KI KM KN KP KR KW KY KZ LA LB LC LI LK LR LS LT LU LV LY ' +
    'MA MC MD ME MF MG MH MK ML MM MN MO MP MQ MR MS MT MU MV MW MX MY MZ NA NC NE NF NG NI NL NO NP NR NU ' +
    'NZ OM PA PE PF PG PH PK PL PM PN PR PS PT PW PY QA RE RO RS RU RW SA SB SC SD SE SG SH SI SJ SK SL SM ' +
    'SN SO SR SS ST SV SX SY SZ TC TD TF TG TH TJ TK TL TM TN TO TR TT TV TW TZ UA UG UM US UY UZ VA VC VE ' +
    'VG VI VN VU WF WS YE YT ZA ZM ZW'
  ).split(' '),
);

export function checkCountry(value: string, field: string): string {
  if (!ISO_COUNTRIES.has(value)) {
    throw validationError(field, 'must be an ISO 3166-1 alpha-2 country code such as US or DE (upper case)');
  }
  return value;
}

/** An IPv4/IPv6 address or CIDR block with a prefix length in range. */
export function isIpOrCidr(value: string): boolean {
  const slash = value.indexOf('/');
  const address = slash === -1 ? value : value.slice(0, slash);
  const version = isIP(address);
  if (version === 0) return false;
  if (slash === -1) return true;
  const prefix = value.slice(slash + 1);
  if (!/^\d{1,3}$/.test(prefix)) return false;
  return Number(prefix) <= (version === 4 ? 32 : 128);
}

export function checkIpList(values: string[], field: string): string[] {
  values.forEach((value, index) => {
    if (!isIpOrCidr(value)) {
      throw validationError(`${field}.${index}`, 'must be an IP address or CIDR block (203.0.113.0/24)', {
        value,
      });
    }
  });
  return values;
}

/** An ISO 8601 time strictly after `now`. */
export function checkFuture(value: string, now: Date, field: string): Date {
  const date = new Date(value);
  if (Number.isNaN(date.getTime()) || date.getTime() <= now.getTime()) {
    throw validationError(field, 'must be an ISO 8601 time in the future');
  }
  return date;
}
