/**
 * Builds agent artifacts into the directory the control plane serves them from:
 *
 *   npm run build:agent-artifact -- [--version 0.2.0] [--arch x64|arm64|all] [--out <dir>]
 *
 * --version defaults to agent/package.json's; --arch to this machine's (all: every architecture with a
 * runtime: this Node for its own, ANVIL_AGENT_RUNTIMES_DIR/<arch>/node for others); --out to
 * ANVIL_AGENT_ARTIFACTS_DIR, else <ANVIL_DATA_DIR>/agent-artifacts, as the control plane reads them.
 * A running control plane serves new versions at once (PUT /v2/admin/agent-version to roll them out).
 */
import { parseArgs } from 'node:util';
import {
  ARTIFACT_ARCHES,
  type ArtifactArch,
  checkoutAgentVersion,
  isArtifactArch,
} from '../src/agent-artifacts/build.ts';
import { AgentArtifactStore } from '../src/agent-artifacts/store.ts';
import { loadConfig } from '../src/config.ts';

const { values } = parseArgs({
  options: { version: { type: 'string' }, arch: { type: 'string' }, out: { type: 'string' } },
  strict: true,
});
const config = loadConfig({
  ...process.env,
  ...(values.out ? { ANVIL_AGENT_ARTIFACTS_DIR: values.out } : {}),
});
const version = values.version ?? checkoutAgentVersion();
const store = new AgentArtifactStore({
  dir: config.agentArtifactsDir,
  bundledVersion: checkoutAgentVersion(),
  runtimesDir: config.agentRuntimesDir,
});
const wanted = values.arch ?? process.arch;
let arches: ArtifactArch[];
if (wanted === 'all') arches = await store.buildableArches();
else if (isArtifactArch(wanted)) arches = [wanted];
else
  throw new Error(`--arch must be one of ${Object.keys(ARTIFACT_ARCHES).join(', ')} or all, got ${wanted}`);
for (const arch of arches) {
  const info = await store.publish(version, arch);
  process.stdout.write(
    `${info.sha256}  ${store.versionDir(version)}/${info.file} (${info.sizeBytes} bytes)\n`,
  );
}
