/**
 * Bundles the agent's TypeScript (and @anvil/shared's) into one plain JavaScript file, agent/dist/main.js,
 * which servers run with `node agent/dist/main.js`. Running the sources through tsx costs the daemon
 * about 30 MB of memory for good: a module-loader thread with its own heap and esbuild's compiler stays
 * alive beside it. npm dependencies stay in node_modules (koffi is a native module);
 * only the workspace packages, which npm installs as TypeScript, are bundled. Not minified: stack traces
 * stay readable.
 *
 * Run: `npm run build --workspace @anvil/agent` (the installer does, on the server).
 */
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { build, type Plugin } from 'esbuild';

const AGENT = join(dirname(fileURLToPath(import.meta.url)), '..');
export const AGENT_BUNDLE = join(AGENT, 'dist', 'main.js');

/** Bare imports other than the workspace's @anvil/* packages are left to Node to load from node_modules. */
const dependenciesStayExternal: Plugin = {
  name: 'dependencies-stay-external',
  setup(b) {
    b.onResolve({ filter: /^[^./]/ }, (args) =>
      args.path.startsWith('@anvil/') ? undefined : { path: args.path, external: true },
    );
  },
};

/**
 * Two files: main.js, and nvml-child.js beside it, the NVML sampler process the agent forks
 * (agent/src/gpu/nvml-sampler.ts looks for it next to the bundle).
 */
export async function buildAgent(outfile = AGENT_BUNDLE): Promise<string> {
  await bundle(join(AGENT, 'src', 'main.ts'), outfile);
  await bundle(join(AGENT, 'src', 'gpu', 'nvml-child.ts'), join(dirname(outfile), 'nvml-child.js'));
  return outfile;
}

async function bundle(entry: string, outfile: string): Promise<void> {
  await build({
    entryPoints: [entry],
    outfile,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20.19',
    plugins: [dependenciesStayExternal],
    banner: {
      js: '// Built from agent/src by agent/scripts/build.ts (npm run build -w @anvil/agent). Do not edit.',
    },
    logLevel: 'warning',
  });
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const out = await buildAgent();
  process.stdout.write(`built ${out}\n`);
}
