import type { RegistryAuth } from '@anvil/shared/protocol';

/** Docker Hub's names: an image without a registry host in its first path part comes from here. */
const DOCKER_HUB = new Set(['docker.io', 'index.docker.io', 'registry-1.docker.io']);
const DOCKER_HUB_SERVER = 'https://index.docker.io/v1/';

/**
 * The registry host[:port] of an image reference, lower-cased, as Docker reads it: the first path part
 * when it has a dot or a port or is `localhost`, else Docker Hub (`docker.io`).
 */
export function registryHostOf(image: string): string {
  const slash = image.indexOf('/');
  if (slash < 0) return 'docker.io';
  const first = image.slice(0, slash);
  if (first.includes('.') || first.includes(':') || first === 'localhost') {
    const host = first.toLowerCase();
    return DOCKER_HUB.has(host) ? 'docker.io' : host;
  }
  return 'docker.io';
}

/** The host[:port] a registry setting names: `host[:port][/path]` or an http(s) URL. */
export function settingHost(url: string): string {
  const bare = url.replace(/^https?:\/\//i, '');
  const host = (bare.split('/')[0] ?? '').toLowerCase();
  return DOCKER_HUB.has(host) ? 'docker.io' : host;
}

export interface RegistrySetting {
  url: string;
  username?: string | null;
  access_token?: string | null;
}

/**
 * The credentials of the first registry setting whose host matches the image's registry, or null
 * (anonymous pull). A setting without a token gives nothing to authenticate with.
 */
export function registryAuthFor(image: string, registries: readonly RegistrySetting[]): RegistryAuth | null {
  const host = registryHostOf(image);
  const match = registries.find((r) => settingHost(r.url) === host && r.access_token);
  if (!match?.access_token) return null;
  return {
    serverAddress: host === 'docker.io' ? DOCKER_HUB_SERVER : host,
    username: match.username ?? '',
    password: match.access_token,
  };
}
