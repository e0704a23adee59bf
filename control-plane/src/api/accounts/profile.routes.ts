import { ApiError } from '@anvil/shared';
import multipart from '@fastify/multipart';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import { AVATAR } from '../../accounts/profile.ts';
import { StringEnum } from '../../accounts/settings-schema.ts';
import type { AppContext } from '../../context.ts';
import { flatErrors } from '../../http/error-body.ts';
import { actorOf, DateTime, Nullable } from './common.ts';

const tags = ['profile'];

/** Largest upload read (and counted) before giving up: beyond it the reported size is a lower bound. */
const UPLOAD_READ_LIMIT = 64 * 1024 * 1024;

const Preferences = Type.Object({
  timezone: Type.String(),
  language: Type.String(),
  theme: Type.String(),
  emailNotifications: Type.Boolean(),
  slackNotifications: Type.Boolean(),
});

const Profile = Type.Object(
  {
    id: Type.String(),
    email: Type.String(),
    name: Nullable(Type.String()),
    username: Nullable(Type.String()),
    avatar: Nullable(Type.String({ description: 'URL of the cropped square avatar' })),
    bio: Nullable(Type.String()),
    location: Nullable(Type.String()),
    website: Nullable(Type.String()),
    twitter: Nullable(Type.String()),
    github: Nullable(Type.String()),
    role: Type.String(),
    createdAt: DateTime,
    updatedAt: DateTime,
    verified: Type.Boolean({
      description: 'The address was confirmed (by accepting an invitation sent to it)',
    }),
    plan: Type.String({ description: "The account's tier: free, pro, enterprise" }),
    accountId: Type.String(),
    preferences: Preferences,
  },
  { $id: 'Profile' },
);

export const profileRoutes: FastifyPluginAsyncTypebox<{ context: AppContext }> = async (app, { context }) => {
  const profile = context.accounts.profile;
  app.addSchema(Profile);
  await app.register(multipart, {
    throwFileSizeLimit: false,
    limits: { fileSize: UPLOAD_READ_LIMIT, files: 1, fields: 4, parts: 5, fieldSize: 1024 },
  });
  const config = { scope: 'accounts' as const };

  app.get(
    '/v2/accounts/profile',
    {
      config,
      schema: {
        tags,
        summary: "The caller's profile",
        response: { 200: Type.Ref('Profile'), ...flatErrors(401, 403, 429) },
      },
    },
    async (request) => profile.get(actorOf(request)),
  );

  app.put(
    '/v2/accounts/profile',
    {
      config,
      schema: {
        tags,
        summary: "Change the caller's profile",
        description:
          'All fields optional; null clears a field. name 1-100 characters, bio up to 500, location up to 100, ' +
          'website an http(s) URL, twitter a handle (1-15 letters, digits, _; a leading @ is dropped), github ' +
          'a GitHub username. Changing email (unique in the team) clears `verified`. Errors: 400 ' +
          'VALIDATION_ERROR with details {field, reason}, INVALID_EMAIL for an address.',
        body: Type.Object(
          {
            name: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
            email: Type.Optional(Type.String({ minLength: 3, maxLength: 254 })),
            username: Type.Optional(Nullable(Type.String({ maxLength: 39 }))),
            bio: Type.Optional(Nullable(Type.String({ maxLength: 500 }))),
            location: Type.Optional(Nullable(Type.String({ maxLength: 100 }))),
            website: Type.Optional(Nullable(Type.String({ maxLength: 2048 }))),
            twitter: Type.Optional(Nullable(Type.String({ maxLength: 16 }))),
            github: Type.Optional(Nullable(Type.String({ maxLength: 39 }))),
          },
          { additionalProperties: false },
        ),
        response: { 200: Type.Ref('Profile'), ...flatErrors(400, 401, 403, 429) },
      },
    },
    async (request) => profile.update(actorOf(request), request.body),
  );

  app.put(
    '/v2/accounts/profile/preferences',
    {
      config,
      schema: {
        tags,
        summary: "Change the caller's preferences",
        body: Type.Object(
          {
            timezone: Type.Optional(
              Type.String({ maxLength: 64, description: 'IANA time zone, e.g. Europe/Paris' }),
            ),
            language: Type.Optional(StringEnum(['en', 'es', 'fr', 'de', 'ja', 'zh'] as const)),
            theme: Type.Optional(StringEnum(['light', 'dark'] as const)),
            emailNotifications: Type.Optional(Type.Boolean()),
            slackNotifications: Type.Optional(Type.Boolean()),
          },
          { additionalProperties: false },
        ),
        response: {
          200: Type.Object({ preferences: Preferences, updatedAt: DateTime }),
          ...flatErrors(400, 401, 403, 429),
        },
      },
    },
    async (request) => profile.updatePreferences(actorOf(request), request.body),
  );

  app.post(
    '/v2/accounts/profile/avatar',
    {
      config,
      schema: {
        tags,
        summary: 'Upload an avatar (multipart/form-data, file field `avatar`)',
        description:
          'The type is read from the bytes, not the file name or declared type: JPEG, PNG or GIF, else 415 ' +
          'INVALID_FILE_TYPE {allowedTypes, receivedType}. Over 5 MB: 413 FILE_TOO_LARGE {maxSize, ' +
          'receivedSize}. Each side must be 100-2048 px, else 400 VALIDATION_ERROR (field avatar). The ' +
          'image is centre-cropped to a square of its shorter side, stored, and served at the returned URL.',
        consumes: ['multipart/form-data'],
        response: {
          200: Type.Object({
            avatar: Type.String(),
            width: Type.Integer(),
            height: Type.Integer(),
            type: Type.String(),
            message: Type.String(),
          }),
          ...flatErrors(400, 401, 403, 413, 415, 429),
        },
      },
    },
    async (request) => {
      if (!request.isMultipart()) {
        throw new ApiError(
          'UNSUPPORTED_MEDIA_TYPE',
          'send the avatar as multipart/form-data (file field "avatar")',
          {
            reason: `content-type ${request.headers['content-type'] ?? 'missing'}`,
          },
        );
      }
      const part = await request.file();
      if (part?.fieldname !== 'avatar') {
        if (part) await drain(part.file);
        throw new ApiError('VALIDATION_ERROR', 'multipart file field "avatar" is required', {
          field: 'avatar',
          reason: 'is required',
        });
      }
      const chunks: Buffer[] = [];
      let size = 0;
      for await (const chunk of part.file as AsyncIterable<Buffer>) {
        size += chunk.length;
        if (size <= AVATAR.maxBytes + 1) chunks.push(chunk);
      }
      return profile.setAvatar(actorOf(request), {
        bytes: Buffer.concat(chunks),
        size,
        declaredType: part.mimetype,
      });
    },
  );

  app.get(
    '/avatars/:file',
    {
      config: { public: true },
      schema: {
        tags,
        summary: 'An avatar image (public; names are content hashes)',
        security: [],
        params: Type.Object({ file: Type.String({ maxLength: 128 }) }),
        response: { ...flatErrors(404) },
      },
    },
    async (request, reply) => {
      const found = await profile.readAvatar(request.params.file);
      if (!found) {
        throw new ApiError('NOT_FOUND', `no avatar ${request.params.file}`, { file: request.params.file });
      }
      return reply
        .type(found.type)
        .header('cache-control', 'public, max-age=31536000, immutable')
        .header('x-content-type-options', 'nosniff')
        .send(found.bytes);
    },
  );
};

async function drain(stream: AsyncIterable<unknown>): Promise<void> {
  for await (const _ of stream) {
    // discard
  }
}
