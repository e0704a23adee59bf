import { createReadStream } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ApiError } from '@anvil/shared';
import { AGENT_ARTIFACTS_PATH } from '@anvil/shared/protocol';
import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import { ARTIFACT_ARCHES, type ArtifactArch, isArtifactArch } from '../../agent-artifacts/build.ts';
import type { ArtifactInfo } from '../../agent-artifacts/store.ts';
import { AGENT_VERSION_PATTERN } from '../../config.ts';
import type { AppContext } from '../../context.ts';
import { artifactPath } from '../../fleet/hosts/agent-versions.ts';

const INSTALL_SCRIPT = join(
  dirname(fileURLToPath(import.meta.url)),
  '..',
  '..',
  '..',
  '..',
  'installer',
  'install.sh',
);

/** A host[:port] safe to put inside a single-quoted shell string and a URL (no quote, space or slash). */
const SAFE_HOST = /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:\d{1,5})?$/;

/**
 * The URL this request reached the control plane at, as install.sh should dial it: the request's
 * scheme and Host when the Host is a plain host[:port] (it ends up in a shell script), else
 * ANVIL_PUBLIC_URL.
 */
export function controlPlaneUrlOf(request: FastifyRequest, publicUrl: string): string {
  const host = request.host;
  return SAFE_HOST.test(host) ? `${request.protocol}://${host}` : publicUrl;
}

/** The one line that joins a GPU server (what the join-token answer and page print). */
export function installCommand(controlPlaneUrl: string, joinToken: string): string {
  return `curl -fsSL ${controlPlaneUrl}/install.sh | sudo sh -s -- --join-token ${joinToken}`;
}

function published(info: ArtifactInfo) {
  return {
    arch: info.arch,
    os: 'linux',
    file: info.file,
    url: artifactPath(info.version, info.file),
    sha256: info.sha256,
    sizeBytes: info.sizeBytes,
    nodeVersion: info.nodeVersion,
    builtAt: info.builtAt,
  };
}

/**
 * What a GPU server fetches to install or upgrade its agent, without any key (an artifact holds no
 * secret; the join token is what admits a host): install.sh with this control plane's URL and the
 * fleet's agent version filled in, the artifacts, their .sha256 files, and a manifest of both.
 */
export const agentArtifactRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  const { artifacts, agentVersions } = context.fleet;

  app.get('/install.sh', { config: { public: true }, schema: { hide: true } }, async (request, reply) => {
    const fleet = await agentVersions.fleet();
    const url = controlPlaneUrlOf(request, context.config.publicUrl);
    const script = (await readFile(INSTALL_SCRIPT, 'utf8'))
      .replace(/^DEFAULT_CONTROL_PLANE=''$/m, `DEFAULT_CONTROL_PLANE='${url}'`)
      .replace(/^DEFAULT_VERSION=''$/m, `DEFAULT_VERSION='${fleet.desiredVersion ?? fleet.bundledVersion}'`);
    return reply.type('text/x-shellscript; charset=utf-8').header('cache-control', 'no-store').send(script);
  });

  app.get(
    `${AGENT_ARTIFACTS_PATH}/manifest.json`,
    { config: { public: true }, schema: { hide: true } },
    async () => {
      const fleet = await agentVersions.fleet();
      const versions = [];
      for (const version of fleet.availableVersions) {
        const infos = await artifacts.published(version);
        versions.push({
          version,
          artifacts: infos.map(published),
          // The shipped version is built on its first request for an architecture with a runtime here.
          buildOnRequest:
            version === fleet.bundledVersion
              ? (await artifacts.buildableArches()).filter((a) => !infos.some((i) => i.arch === a))
              : [],
        });
      }
      return { desiredVersion: fleet.desiredVersion, bundledVersion: fleet.bundledVersion, versions };
    },
  );

  app.get<{ Params: { version: string; file: string } }>(
    `${AGENT_ARTIFACTS_PATH}/:version/:file`,
    { config: { public: true }, schema: { hide: true } },
    async (request, reply) => {
      const { version, file } = request.params;
      const match = /^anvil-agent-(.+)-linux-([a-z0-9]+)\.tar\.gz(\.sha256)?$/.exec(file);
      const arch = match?.[2] ?? '';
      if (!AGENT_VERSION_PATTERN.test(version) || !match || match[1] !== version || !isArtifactArch(arch)) {
        throw new ApiError(
          'NOT_FOUND',
          `no such artifact: ${file} (files are anvil-agent-<version>-linux-<${Object.keys(ARTIFACT_ARCHES).join('|')}>.tar.gz[.sha256])`,
          { version, file },
        );
      }
      const info = await artifacts.get(version, arch as ArtifactArch);
      if (match[3]) {
        // The format sha256sum -c reads.
        return reply.type('text/plain; charset=utf-8').send(`${info.sha256}  ${info.file}\n`);
      }
      return reply
        .type('application/gzip')
        .header('content-length', String(info.sizeBytes))
        .header('x-content-sha256', info.sha256)
        .send(createReadStream(join(artifacts.versionDir(version), info.file)));
    },
  );
};
