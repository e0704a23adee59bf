/**
 * Set by the artifact build (control-plane/src/agent-artifacts/build.ts, esbuild `define`) to the
 * version the artifact is published as; absent when the agent runs from its sources.
 */
declare const __ANVIL_AGENT_VERSION__: string | undefined;

/**
 * Reported in register and hello; the control plane upgrades an agent whose version differs from the
 * one it wants for the host. From the sources it is agent/package.json's version (a test checks).
 */
export const AGENT_VERSION: string =
  typeof __ANVIL_AGENT_VERSION__ === 'string' ? __ANVIL_AGENT_VERSION__ : '0.1.0';
