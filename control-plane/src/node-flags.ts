/**
 * V8 flags the control plane runs with: `npm start` passes them (package.json), and so do the test
 * harness's control-plane process and the benches, so what is measured is what runs.
 *
 * `--max-semi-space-size=64` (MiB; V8's default is 16): with the default, a scavenge of a busy API
 * process came every ~55 ms, found the objects of the requests still in flight alive, copied them
 * (~7 ms a scavenge) and promoted ~2.6 MB each time into the old generation, which then needed a full
 * mark-compact every few seconds (`--trace-gc` under bench/auth-verify.ts: 300 scavenges and 8
 * mark-compacts in a run). With 64 MiB, scavenges come 4× less often, the in-flight requests are a
 * small share of what they find, each takes ~1.5 ms and promotes nothing. The cost is up to 3 × 64 MiB
 * of young generation, committed only as it is used.
 */
export const CONTROL_PLANE_NODE_FLAGS: readonly string[] = ['--max-semi-space-size=64'];

/**
 * The flags of CONTROL_PLANE_NODE_FLAGS this process was not started with, looked for where Node takes
 * them from: its command line (`execArgv`) and NODE_OPTIONS. A service manager that runs
 * `node control-plane/src/main.ts` without them gets a warning at start-up naming them.
 */
export function missingNodeFlags(
  execArgv: readonly string[] = process.execArgv,
  nodeOptions: string | undefined = process.env['NODE_OPTIONS'],
): string[] {
  const given = new Set([...execArgv, ...(nodeOptions ?? '').split(/\s+/)]);
  return CONTROL_PLANE_NODE_FLAGS.filter((flag) => !given.has(flag));
}
