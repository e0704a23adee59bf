/**
 * Builds the self-contained agent artifact a GPU server installs: one tar.gz holding
 *
 *   VERSION                          the agent version, one line
 *   bin/node                         an official Node.js runtime for the server's architecture
 *   lib/agent.mjs                    the agent and every pure-JavaScript dependency, bundled by esbuild
 *   lib/node_modules/koffi/...       koffi (NVML's FFI), with only the native binary of that architecture
 *
 * so a server needs neither a checkout, nor npm, nor its distribution's Node.js (Debian 12 and Ubuntu
 * 22.04/24.04 package ones older than the agent needs). The runtime is a Node binary of the
 * architecture: the control plane's own (process.execPath) for its architecture, or one the operator
 * puts in ANVIL_AGENT_RUNTIMES_DIR/<arch>/node for another.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rename, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { fileURLToPath } from 'node:url';
import { createGzip } from 'node:zlib';
import { build, type Plugin } from 'esbuild';
import { pack } from 'tar-stream';

const REPO = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const AGENT_ENTRY = join(REPO, 'agent', 'src', 'main.ts');
const KOFFI = join(REPO, 'node_modules', 'koffi');

/** Architectures an artifact can be built for: Node's names (process.arch), and koffi's directory for each. */
export const ARTIFACT_ARCHES = { x64: 'linux_x64', arm64: 'linux_arm64' } as const;
export type ArtifactArch = keyof typeof ARTIFACT_ARCHES;

export function isArtifactArch(arch: string): arch is ArtifactArch {
  return Object.hasOwn(ARTIFACT_ARCHES, arch);
}

/** Artifact file name, as served under /agent/artifacts/<version>/. */
export function artifactFileName(version: string, arch: ArtifactArch): string {
  return `anvil-agent-${version}-linux-${arch}.tar.gz`;
}

export interface BuiltArtifact {
  version: string;
  arch: ArtifactArch;
  file: string;
  sha256: string;
  sizeBytes: number;
  nodeVersion: string;
}

/**
 * Native add-ons and optional native helpers stay out of the bundle: koffi is shipped beside it, and
 * the others (ssh2's crypto binding, cpu-features, ws's bufferutil) are optional requires in a
 * try/catch that fall back to JavaScript.
 */
const nativeStaysExternal: Plugin = {
  name: 'native-stays-external',
  setup(b) {
    b.onResolve({ filter: /\.node$|^(koffi|cpu-features|bufferutil|utf-8-validate)$/ }, (args) => ({
      path: args.path,
      external: true,
    }));
  },
};

/** Bundles the agent into one ES module; `version` is what it reports (AGENT_VERSION). */
export async function bundleAgent(outfile: string, version: string): Promise<void> {
  await build({
    entryPoints: [AGENT_ENTRY],
    outfile,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20.19',
    plugins: [nativeStaysExternal],
    define: { __ANVIL_AGENT_VERSION__: JSON.stringify(version) },
    // CommonJS dependencies use require, __dirname and __filename, which an ES module lacks.
    banner: {
      js: [
        '// The Anvil agent, bundled by control-plane/src/agent-artifacts/build.ts. Do not edit.',
        "import { createRequire as __anvilCreateRequire } from 'node:module';",
        "import { dirname as __anvilDirname } from 'node:path';",
        "import { fileURLToPath as __anvilFileUrlToPath } from 'node:url';",
        'const require = __anvilCreateRequire(import.meta.url);',
        'const __filename = __anvilFileUrlToPath(import.meta.url);',
        'const __dirname = __anvilDirname(__filename);',
      ].join('\n'),
    },
    logLevel: 'error',
  });
}

async function nodeVersionOf(nodeBinary: string, fallback: string | null): Promise<string> {
  if (fallback) return fallback;
  return new Promise((resolve, reject) =>
    execFile(nodeBinary, ['-p', 'process.version'], (err, out) =>
      err ? reject(new Error(`${nodeBinary} does not run here: ${err.message}`)) : resolve(out.trim()),
    ),
  );
}

export interface BuildOptions {
  version: string;
  arch: ArtifactArch;
  /** The Node.js binary shipped in the artifact (it must be of `arch`). */
  nodeBinary: string;
  /** The runtime's version when known without running it (a binary of another architecture cannot run here). */
  nodeVersion?: string | null;
  outDir: string;
}

/** Builds the artifact into outDir (written under a temporary name, renamed when complete). */
export async function buildAgentArtifact(options: BuildOptions): Promise<BuiltArtifact> {
  const { version, arch, outDir } = options;
  const work = await mkdtemp(join(tmpdir(), 'anvil-agent-artifact-'));
  try {
    const bundle = join(work, 'agent.mjs');
    await bundleAgent(bundle, version);
    const nodeVersion = await nodeVersionOf(options.nodeBinary, options.nodeVersion ?? null);
    const koffiDir = `build/koffi/${ARTIFACT_ARCHES[arch]}`;
    const files: { name: string; source: string; mode: number }[] = [
      { name: 'bin/node', source: options.nodeBinary, mode: 0o755 },
      { name: 'lib/agent.mjs', source: bundle, mode: 0o644 },
      ...['package.json', 'index.js', 'LICENSE.txt'].map((f) => ({
        name: `lib/node_modules/koffi/${f}`,
        source: join(KOFFI, f),
        mode: 0o644,
      })),
      {
        name: `lib/node_modules/koffi/${koffiDir}/koffi.node`,
        source: join(KOFFI, koffiDir, 'koffi.node'),
        mode: 0o755,
      },
    ];
    await mkdir(outDir, { recursive: true });
    const file = join(outDir, artifactFileName(version, arch));
    const partial = `${file}.partial-${process.pid}`;
    const tar = pack();
    const hash = createHash('sha256');
    const writing = pipeline(
      tar,
      createGzip({ level: 6 }),
      async function* (chunks: AsyncIterable<Buffer>) {
        for await (const chunk of chunks) {
          hash.update(chunk);
          yield chunk;
        }
      },
      createWriteStream(partial),
    );
    const entry = (header: Parameters<typeof tar.entry>[0], body: Buffer = Buffer.alloc(0)) =>
      new Promise<void>((resolve, reject) => {
        tar.entry(header, body, (err) => (err ? reject(err) : resolve()));
      });
    const mtime = new Date();
    await entry({ name: 'VERSION', mode: 0o644, mtime }, Buffer.from(`${version}\n`));
    const dirs = new Set<string>();
    for (const f of files) {
      for (let d = dirname(f.name); d !== '.'; d = dirname(d)) dirs.add(d);
    }
    for (const d of [...dirs].sort()) await entry({ name: `${d}/`, type: 'directory', mode: 0o755, mtime });
    for (const f of files) {
      const size = (await stat(f.source)).size;
      const stream = tar.entry({ name: f.name, size, mode: f.mode, mtime });
      await pipeline(createReadStream(f.source), stream);
    }
    tar.finalize();
    await writing;
    await rename(partial, file);
    return {
      version,
      arch,
      file,
      sha256: hash.digest('hex'),
      sizeBytes: (await stat(file)).size,
      nodeVersion,
    };
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

/** The agent version this checkout builds by default: agent/package.json's. */
export function checkoutAgentVersion(): string {
  const pkg = JSON.parse(readFileSync(join(REPO, 'agent', 'package.json'), 'utf8')) as { version: string };
  return pkg.version;
}
