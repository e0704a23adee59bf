/** Kept equal to agent/package.json's version (a test checks), reported in register and hello. */
export const AGENT_VERSION = '0.1.0';
