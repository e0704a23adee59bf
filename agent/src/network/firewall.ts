import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

const exec = promisify(execFile);

/** Runs a firewall command (argument array, never a shell string); rejects when it exits non-zero. */
export type CommandRunner = (file: string, args: string[]) => Promise<void>;

export const runCommand: CommandRunner = async (file, args) => {
  await exec(file, args, { timeout: 30_000 });
};

/** Every rule the agent adds carries this comment, so an operator (and the agent) can tell them apart. */
export const RULE_COMMENT = 'anvil-isolation';

/** The link-local range where clouds serve instance metadata (169.254.169.254) and more. */
export const LINK_LOCAL_V4 = '169.254.0.0/16';

/** Every bridge of an account network is named with this prefix (see AccountNetworks). */
export const BRIDGE_PREFIX = 'anvt';

interface Rule {
  binary: 'iptables' | 'ip6tables';
  chain: 'INPUT' | 'DOCKER-USER';
  spec: string[];
}

/**
 * The rules that fence one account network's bridge, in the order they must match.
 * - INPUT: traffic from the bridge to any of the host's own addresses (control plane, agent, Docker API,
 *   SSH, the bridge gateway itself) is dropped unless it answers a connection the host opened: the
 *   agent's tunnels dial the container's address from the host, and their replies come back this way.
 *   Container-to-host traffic never crosses FORWARD or DOCKER-USER, so DOCKER-USER alone cannot do this.
 * - DOCKER-USER (forwarded traffic, checked before Docker's own rules): link-local destinations are
 *   dropped; traffic to another account's bridge is dropped (Docker's DOCKER-ISOLATION chains do the same
 *   when its iptables management is on; this keeps it so when it is off), traffic inside the bridge
 *   returns to Docker's rules, which accept it.
 * IPv6: the networks have no IPv6 addresses, but the link-local fe80:: address of the bridge still reaches
 * the host, so the INPUT rule is repeated for ip6tables.
 */
export function bridgeRules(bridge: string, acceptTcpPorts: readonly number[] = []): Rule[] {
  const comment = ['-m', 'comment', '--comment', `${RULE_COMMENT} ${bridge}`];
  const notReply = ['-m', 'conntrack', '!', '--ctstate', 'ESTABLISHED,RELATED'];
  return [
    // The agent's worker API port (worker-api/relay.ts), the one host service containers may open: it
    // answers only this host's containers and relays them to the control plane, which checks their token.
    ...acceptTcpPorts.map(
      (port): Rule => ({
        binary: 'iptables',
        chain: 'INPUT',
        spec: ['-i', bridge, '-p', 'tcp', '--dport', String(port), ...comment, '-j', 'ACCEPT'],
      }),
    ),
    { binary: 'iptables', chain: 'INPUT', spec: ['-i', bridge, ...notReply, ...comment, '-j', 'DROP'] },
    { binary: 'ip6tables', chain: 'INPUT', spec: ['-i', bridge, ...notReply, ...comment, '-j', 'DROP'] },
    {
      binary: 'iptables',
      chain: 'DOCKER-USER',
      spec: ['-i', bridge, '-d', LINK_LOCAL_V4, ...comment, '-j', 'DROP'],
    },
    {
      binary: 'iptables',
      chain: 'DOCKER-USER',
      spec: ['-i', bridge, '-o', bridge, ...comment, '-j', 'RETURN'],
    },
    {
      binary: 'iptables',
      chain: 'DOCKER-USER',
      spec: ['-i', bridge, '-o', `${BRIDGE_PREFIX}+`, ...comment, '-j', 'DROP'],
    },
  ];
}

export interface FirewallState {
  enforced: boolean;
  /** Why isolation is not (fully) enforced; null when it is. */
  reason: string | null;
}

export interface Firewall {
  /** Whether this host can enforce the rules; probed once, then remembered. */
  probe(): Promise<FirewallState>;
  /** Puts the bridge's rules in place (again, after a reboot or a flush); a no-op when they are. */
  ensure(bridge: string): Promise<void>;
  /** Removes every rule of the bridge; rules already gone count as removed. */
  remove(bridge: string): Promise<void>;
}

function describe(err: unknown): string {
  const e = err as { code?: unknown; stderr?: unknown; message?: unknown };
  if (e.code === 'ENOENT') return 'not installed';
  const stderr = typeof e.stderr === 'string' ? e.stderr.trim() : '';
  return stderr || String(e.message ?? err);
}

/**
 * The agent's own iptables rules, per account bridge (`-w`: wait for the xtables lock that dockerd also
 * takes). A host without iptables, or where the agent may not change it, reports that isolation is not
 * enforced instead of pretending.
 */
export function createIptablesFirewall(
  run: CommandRunner = runCommand,
  options: { acceptTcpPorts?: readonly number[] } = {},
): Firewall {
  let state: FirewallState | null = null;
  let ipv4 = true;
  let ipv6 = true;

  async function has(rule: Rule): Promise<boolean> {
    try {
      await run(rule.binary, ['-w', '-C', rule.chain, ...rule.spec]);
      return true;
    } catch {
      return false;
    }
  }

  async function deleteAll(rule: Rule): Promise<void> {
    // A rule inserted twice (two agents racing) needs two deletes; stop at the first "not there".
    for (let i = 0; i < 8; i += 1) {
      try {
        await run(rule.binary, ['-w', '-D', rule.chain, ...rule.spec]);
      } catch {
        return;
      }
    }
  }

  function rulesFor(bridge: string): Rule[] {
    return bridgeRules(bridge, options.acceptTcpPorts ?? []).filter((r) => ipv6 || r.binary === 'iptables');
  }

  return {
    async probe() {
      if (state) return state;
      const problems: string[] = [];
      try {
        await run('iptables', ['-w', '-S', 'INPUT']);
      } catch (err) {
        ipv4 = false;
        problems.push(`iptables: ${describe(err)}`);
      }
      if (ipv4) {
        try {
          await run('iptables', ['-w', '-S', 'DOCKER-USER']);
        } catch (err) {
          problems.push(
            `no DOCKER-USER chain (dockerd runs with --iptables=false?): ${describe(err)}; forwarded traffic is not filtered`,
          );
        }
      }
      try {
        await run('ip6tables', ['-w', '-S', 'INPUT']);
      } catch (err) {
        ipv6 = false;
        problems.push(`ip6tables: ${describe(err)}`);
      }
      state = { enforced: problems.length === 0, reason: problems.length > 0 ? problems.join('; ') : null };
      return state;
    },

    async ensure(bridge) {
      const { enforced } = await this.probe();
      if (!ipv4) return;
      const rules = rulesFor(bridge);
      const present = await Promise.all(rules.map(has));
      if (present.every(Boolean)) return;
      // Rebuild the whole set so the order holds: delete what is left, then insert at the top in reverse.
      for (const rule of rules) await deleteAll(rule);
      const errors: string[] = [];
      for (const rule of [...rules].reverse()) {
        try {
          await run(rule.binary, ['-w', '-I', rule.chain, '1', ...rule.spec]);
        } catch (err) {
          errors.push(`${rule.binary} -I ${rule.chain}: ${describe(err)}`);
        }
      }
      if (errors.length > 0 && enforced)
        throw new Error(`firewall rules for ${bridge}: ${errors.join('; ')}`);
    },

    async remove(bridge) {
      for (const rule of rulesFor(bridge)) await deleteAll(rule);
    },
  };
}
