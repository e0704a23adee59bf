import { createHash } from 'node:crypto';
import { mkdir, readFile, rename, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ApiError } from '@anvil/shared';
import sharp from 'sharp';
import type { Clock } from '../auth/clock.ts';
import type { Prisma, User } from '../db/generated/client.ts';
import type { Database } from '../db/index.ts';
import type { Actor } from './access.ts';
import { avatarUrl } from './member-views.ts';
import { checkEmail, checkHttpUrl, checkTimeZone, validationError } from './validation.ts';

export interface ProfilePatch {
  name?: string | undefined;
  email?: string | undefined;
  username?: string | null | undefined;
  bio?: string | null | undefined;
  location?: string | null | undefined;
  website?: string | null | undefined;
  twitter?: string | null | undefined;
  github?: string | null | undefined;
}

export interface ProfilePreferences {
  timezone: string;
  language: string;
  theme: string;
  emailNotifications: boolean;
  slackNotifications: boolean;
}

export const DEFAULT_PREFERENCES: ProfilePreferences = {
  timezone: 'UTC',
  language: 'en',
  theme: 'light',
  emailNotifications: true,
  slackNotifications: false,
};

export const TWITTER_HANDLE = /^@?[A-Za-z0-9_]{1,15}$/;
export const GITHUB_USERNAME = /^[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}$/;
export const USERNAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{2,38}$/;

/** Avatar rules (spec: Limits → Other bounds). */
export const AVATAR = {
  maxBytes: 5 * 1024 * 1024,
  minPixels: 100,
  maxPixels: 2048,
  types: ['image/jpeg', 'image/png', 'image/gif'] as const,
  /** Frames an animated GIF may have: decoding cost grows with them, whatever the file's size. */
  maxFrames: 100,
  /**
   * Pixels decoded at most, every frame counted (sharp's limitInputPixels): a 5 MB file can claim far
   * more than it holds. Four full 2048x2048 frames, about 64 MiB of RGBA.
   */
  maxInputPixels: 4 * 2048 * 2048,
};

/** The type an upload really is, from its first bytes; names and declared types are not trusted. */
export function sniffImageType(bytes: Buffer): string {
  const starts = (...signature: number[]) => signature.every((b, i) => bytes[i] === b);
  if (starts(0xff, 0xd8, 0xff)) return 'image/jpeg';
  if (starts(0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a)) return 'image/png';
  if (
    bytes.subarray(0, 6).toString('latin1') === 'GIF87a' ||
    bytes.subarray(0, 6).toString('latin1') === 'GIF89a'
  ) {
    return 'image/gif';
  }
  if (
    bytes.subarray(0, 4).toString('latin1') === 'RIFF' &&
    bytes.subarray(8, 12).toString('latin1') === 'WEBP'
  ) {
    return 'image/webp';
  }
  if (bytes.subarray(0, 4).toString('latin1') === '%PDF') return 'application/pdf';
  if (starts(0x42, 0x4d)) return 'image/bmp';
  if (bytes.subarray(4, 12).toString('latin1').startsWith('ftyp')) return 'image/heic-or-video';
  if (/^\s*</.test(bytes.subarray(0, 64).toString('latin1'))) return 'text/xml-or-html';
  return 'application/octet-stream';
}

const EXTENSIONS: Record<string, string> = { 'image/jpeg': 'jpg', 'image/png': 'png', 'image/gif': 'gif' };

export const AVATAR_FILE = /^usr_[a-z0-9]+-[0-9a-f]{16}\.(jpg|png|gif)$/;

/** The user profile, its preferences, and the avatar image. */
export class ProfileService {
  constructor(private readonly deps: { db: Database; clock: Clock; dataDir: string; publicUrl: string }) {}

  get avatarDir(): string {
    return join(this.deps.dataDir, 'avatars');
  }

  private async me(actor: Actor): Promise<User> {
    const user = await this.deps.db.prisma.user.findFirst({
      where: { id: actor.principal.userId, accountId: actor.principal.accountId },
    });
    if (!user) throw new ApiError('UNAUTHORIZED', 'the API key owner is no longer a member', {});
    return user;
  }

  async view(user: User) {
    const account = await this.deps.db.prisma.account.findUnique({ where: { id: user.accountId } });
    return {
      id: user.id,
      email: user.email,
      name: user.name,
      username: user.username,
      avatar: avatarUrl(this.deps.publicUrl, user.avatarFile),
      bio: user.bio,
      location: user.location,
      website: user.website,
      twitter: user.twitter,
      github: user.github,
      role: user.role,
      createdAt: user.createdAt.toISOString(),
      updatedAt: user.updatedAt.toISOString(),
      verified: user.verified,
      plan: account?.tier ?? 'free',
      accountId: user.accountId,
      preferences: preferencesOf(user),
    };
  }

  async get(actor: Actor) {
    return this.view(await this.me(actor));
  }

  async update(actor: Actor, patch: ProfilePatch) {
    const user = await this.me(actor);
    const data: Prisma.UserUpdateInput = {};
    if (patch.name !== undefined) {
      const name = patch.name.trim();
      if (name.length === 0) throw validationError('name', 'must not be blank');
      data.name = name;
    }
    if (patch.email !== undefined) {
      const email = checkEmail(patch.email);
      if (email.toLowerCase() !== user.email.toLowerCase()) {
        const taken = await this.deps.db.prisma.user.findFirst({
          where: {
            accountId: user.accountId,
            email: { equals: email, mode: 'insensitive' },
            id: { not: user.id },
          },
        });
        if (taken) throw validationError('email', 'is already used by another member of this team');
        data.email = email;
        data.verified = false;
      }
    }
    if (patch.username !== undefined) {
      if (patch.username !== null && !USERNAME.test(patch.username)) {
        throw validationError(
          'username',
          'must be 3-39 letters, digits, ".", "_" or "-", starting with a letter or digit',
        );
      }
      data.username = patch.username;
    }
    if (patch.bio !== undefined) data.bio = patch.bio;
    if (patch.location !== undefined) data.location = patch.location;
    if (patch.website !== undefined) {
      data.website =
        patch.website === null || patch.website === '' ? null : checkHttpUrl(patch.website, 'website');
    }
    if (patch.twitter !== undefined) {
      if (patch.twitter !== null && !TWITTER_HANDLE.test(patch.twitter)) {
        throw validationError(
          'twitter',
          'must be a handle of 1-15 letters, digits or _ (an optional leading @)',
        );
      }
      data.twitter = patch.twitter === null ? null : patch.twitter.replace(/^@/, '');
    }
    if (patch.github !== undefined) {
      if (patch.github !== null && !GITHUB_USERNAME.test(patch.github)) {
        throw validationError('github', 'must be a GitHub username: 1-39 letters, digits or single hyphens');
      }
      data.github = patch.github;
    }
    const updated = await this.deps.db.prisma.user.update({ where: { id: user.id }, data });
    return this.view(updated);
  }

  async updatePreferences(actor: Actor, patch: Partial<ProfilePreferences>) {
    const user = await this.me(actor);
    const next = { ...preferencesOf(user) };
    if (patch.timezone !== undefined) next.timezone = checkTimeZone(patch.timezone, 'timezone');
    if (patch.language !== undefined) next.language = patch.language;
    if (patch.theme !== undefined) next.theme = patch.theme;
    if (patch.emailNotifications !== undefined) next.emailNotifications = patch.emailNotifications;
    if (patch.slackNotifications !== undefined) next.slackNotifications = patch.slackNotifications;
    const updated = await this.deps.db.prisma.user.update({
      where: { id: user.id },
      data: { preferences: next as unknown as Prisma.InputJsonValue },
    });
    return { preferences: preferencesOf(updated), updatedAt: updated.updatedAt.toISOString() };
  }

  /**
   * Stores a new avatar: the type is decided by the bytes (JPEG, PNG, GIF; else 415), each side must be
   * 100-2048 px (else 400), and the image is centre-cropped to a square of its shorter side (animated GIFs
   * keep their frames). Files are named by content hash, served at /avatars/<file>; the previous one is
   * deleted.
   */
  async setAvatar(actor: Actor, upload: { bytes: Buffer; size: number; declaredType: string | undefined }) {
    const user = await this.me(actor);
    const { bytes } = upload;
    if (upload.size > AVATAR.maxBytes || bytes.length > AVATAR.maxBytes) {
      throw new ApiError('FILE_TOO_LARGE', 'avatar images may be at most 5 MB', {
        maxSize: AVATAR.maxBytes,
        receivedSize: Math.max(upload.size, bytes.length),
      });
    }
    const type = sniffImageType(bytes);
    if (!(AVATAR.types as readonly string[]).includes(type)) {
      throw new ApiError('INVALID_FILE_TYPE', 'avatar must be a JPEG, PNG or GIF image', {
        allowedTypes: [...AVATAR.types],
        receivedType: type,
        declaredType: upload.declaredType ?? null,
      });
    }
    const animated = type === 'image/gif';
    // Every decode is bounded: in pixels (all frames together) and, for GIFs, in frames.
    const input = { animated, limitInputPixels: AVATAR.maxInputPixels };
    let width: number;
    let height: number;
    let frames: number;
    try {
      const meta = await sharp(bytes, { animated }).metadata();
      width = meta.autoOrient?.width ?? meta.width ?? 0;
      height = meta.pageHeight ?? meta.autoOrient?.height ?? meta.height ?? 0;
      frames = meta.pages ?? 1;
    } catch {
      throw validationError('avatar', `the ${type} image could not be decoded`);
    }
    if (frames > AVATAR.maxFrames) {
      throw validationError(
        'avatar',
        `an animated avatar may have at most ${AVATAR.maxFrames} frames; got ${frames}`,
        {
          frames,
          maxFrames: AVATAR.maxFrames,
        },
      );
    }
    if (width * height * (animated ? frames : 1) > AVATAR.maxInputPixels) {
      throw validationError(
        'avatar',
        `the image has ${width}x${height} pixels in ${frames} frame(s): more than ${AVATAR.maxInputPixels} pixels in all`,
        { width, height, frames, maxInputPixels: AVATAR.maxInputPixels },
      );
    }
    const rule = `each side must be ${AVATAR.minPixels}-${AVATAR.maxPixels} pixels`;
    if (Math.min(width, height) < AVATAR.minPixels || Math.max(width, height) > AVATAR.maxPixels) {
      throw validationError('avatar', `${rule}; got ${width}x${height}`, {
        width,
        height,
        minSize: AVATAR.minPixels,
        maxSize: AVATAR.maxPixels,
      });
    }
    const side = Math.min(width, height);
    let output: Buffer;
    try {
      const pipeline = sharp(bytes, input)
        .rotate()
        .resize({ width: side, height: side, fit: 'cover', position: 'centre' });
      output =
        type === 'image/jpeg'
          ? await pipeline.jpeg({ quality: 90 }).toBuffer()
          : type === 'image/png'
            ? await pipeline.png().toBuffer()
            : await pipeline.gif().toBuffer();
    } catch {
      throw validationError('avatar', `the ${type} image could not be decoded`);
    }
    const hash = createHash('sha256').update(output).digest('hex').slice(0, 16);
    const file = `${user.id}-${hash}.${EXTENSIONS[type]}`;
    await mkdir(this.avatarDir, { recursive: true });
    const temp = join(this.avatarDir, `.${file}.${process.pid}.tmp`);
    await writeFile(temp, output);
    await rename(temp, join(this.avatarDir, file));
    await this.deps.db.prisma.user.update({ where: { id: user.id }, data: { avatarFile: file } });
    if (user.avatarFile && user.avatarFile !== file) {
      await unlink(join(this.avatarDir, user.avatarFile)).catch((error: NodeJS.ErrnoException) => {
        if (error.code !== 'ENOENT') throw error;
      });
    }
    return {
      avatar: avatarUrl(this.deps.publicUrl, file)!,
      width: side,
      height: side,
      type,
      message: `avatar updated (${side}x${side} ${type})`,
    };
  }

  /** The bytes of a stored avatar, or null. File names are checked against their pattern first. */
  async readAvatar(file: string): Promise<{ bytes: Buffer; type: string } | null> {
    if (!AVATAR_FILE.test(file)) return null;
    try {
      const bytes = await readFile(join(this.avatarDir, file));
      const ext = file.slice(file.lastIndexOf('.') + 1);
      const type = Object.entries(EXTENSIONS).find(([, e]) => e === ext)?.[0] ?? 'application/octet-stream';
      return { bytes, type };
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw error;
    }
  }
}

export function preferencesOf(user: User): ProfilePreferences {
  const stored = (user.preferences ?? {}) as Partial<ProfilePreferences>;
  return { ...DEFAULT_PREFERENCES, ...stored };
}
