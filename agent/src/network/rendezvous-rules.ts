import type { WorkloadSpec } from '@anvil/shared/protocol';
import { BRIDGE_PREFIX, type RendezvousRule } from './firewall.ts';

/**
 * The rules for the multi-host training workers in `desired` on this host (pure, so it is tested alone).
 * The cross-host path is a TCP port published on each rank-0 host's rendezvous address:
 * - filter ANVIL-RENDEZVOUS, entered from INPUT and DOCKER-USER for traffic from every account bridge
 *   (bridgeRules): a worker's own account bridge may reach the endpoints its spec dials; every other
 *   bridge on this host is dropped there (so another account on a peer host cannot borrow the host's
 *   admitted address);
 * - mangle ANVIL-RENDEZVOUS, entered from PREROUTING before Docker's DNAT: a published port is reached
 *   only from the gang's peer hosts, from the host itself, or from this host's account bridges (which
 *   the filter rules above decide on); anything else is dropped.
 */
export function rendezvousRules(
  desired: readonly WorkloadSpec[],
  bridgeOf: (spec: WorkloadSpec) => string | null,
  selfAddress: string | null,
): RendezvousRule[] {
  const rules: RendezvousRule[] = [];
  const seen = new Set<string>();
  const add = (rule: RendezvousRule) => {
    const key = JSON.stringify(rule);
    if (seen.has(key)) return;
    seen.add(key);
    rules.push(rule);
  };
  for (const spec of desired) {
    const path = spec.rendezvous;
    const bridge = bridgeOf(spec);
    if (!path || !bridge) continue;
    for (const { address, port } of path.dial) {
      const to = ['-d', `${address}/32`, '-p', 'tcp', '--dport', String(port)];
      add({ table: 'filter', first: true, spec: ['-i', bridge, ...to, '-j', 'ACCEPT'] });
      add({ table: 'filter', first: false, spec: [...to, '-j', 'DROP'] });
    }
    if (!selfAddress) continue;
    for (const port of path.publish) {
      const to = ['-d', `${selfAddress}/32`, '-p', 'tcp', '--dport', String(port)];
      for (const peer of path.peers)
        add({ table: 'mangle', first: true, spec: ['-s', `${peer}/32`, ...to, '-j', 'RETURN'] });
      for (const local of [`${BRIDGE_PREFIX}+`, 'lo'])
        add({ table: 'mangle', first: true, spec: ['-i', local, ...to, '-j', 'RETURN'] });
      add({ table: 'mangle', first: false, spec: [...to, '-j', 'DROP'] });
    }
  }
  return rules;
}
