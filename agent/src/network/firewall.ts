import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

const exec = promisify(execFile);

/** Runs a firewall command (argument array, never a shell string): its stdout; rejects when it exits non-zero. */
export type CommandRunner = (file: string, args: string[]) => Promise<string | undefined>;

export const runCommand: CommandRunner = async (file, args) => {
  const { stdout } = await exec(file, args, { timeout: 30_000 });
  return stdout;
};

/** Every rule the agent adds carries this comment, so an operator (and the agent) can tell them apart. */
export const RULE_COMMENT = 'anvil-isolation';

/** The link-local range where clouds serve instance metadata (169.254.169.254) and more. */
export const LINK_LOCAL_V4 = '169.254.0.0/16';

/** Every bridge of an account network is named with this prefix (see AccountNetworks). */
export const BRIDGE_PREFIX = 'anvt';

/** The chain (in the filter and mangle tables) that holds every host's rendezvous rules. */
export const RENDEZVOUS_CHAIN = 'ANVIL-RENDEZVOUS';
/** Comment of the rendezvous rules; a host's own rules add its tag (two agents may share one kernel). */
export const RENDEZVOUS_COMMENT = 'anvil-rendezvous';

/**
 * One rule of a multi-host gang's path. `first`: inserted at the top of the chain (admissions), else
 * appended (the drops that follow every admission, whichever host's agent added it).
 */
export interface RendezvousRule {
  table: 'filter' | 'mangle';
  first: boolean;
  spec: string[];
}

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
 * - Before both, traffic from the bridge visits ANVIL-RENDEZVOUS (rendezvous-rules.ts): a multi-host
 *   training worker's path to its gang's rank 0 is admitted there, and other bridges' traffic to it dropped.
 * IPv6: the networks have no IPv6 addresses, but the link-local fe80:: address of the bridge still reaches
 * the host, so the INPUT rule is repeated for ip6tables.
 */
export function bridgeRules(bridge: string, acceptTcpPorts: readonly number[] = []): Rule[] {
  const comment = ['-m', 'comment', '--comment', `${RULE_COMMENT} ${bridge}`];
  const notReply = ['-m', 'conntrack', '!', '--ctstate', 'ESTABLISHED,RELATED'];
  const toRendezvous = ['-i', bridge, '-m', 'comment', '--comment', `${RENDEZVOUS_COMMENT} ${bridge}`];
  return [
    { binary: 'iptables', chain: 'INPUT', spec: [...toRendezvous, '-j', RENDEZVOUS_CHAIN] },
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
    { binary: 'iptables', chain: 'DOCKER-USER', spec: [...toRendezvous, '-j', RENDEZVOUS_CHAIN] },
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
  /**
   * Makes this host's rendezvous rules (those tagged `tag`) exactly `rules`: the new set is put in place
   * before the old one is removed, so no moment is left without the drops.
   */
  rendezvous(tag: string, rules: readonly RendezvousRule[]): Promise<void>;
}

/** Splits a line of `iptables -S` into arguments (double-quoted comments kept whole). */
export function splitRuleLine(line: string): string[] {
  const args: string[] = [];
  for (const match of line.matchAll(/"((?:[^"\\]|\\.)*)"|(\S+)/g)) args.push(match[1] ?? match[2] ?? '');
  return args;
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

  /** The rendezvous chains exist (created once; an existing one is kept) and mangle PREROUTING enters it. */
  async function rendezvousChains(): Promise<void> {
    for (const table of ['filter', 'mangle'] as const) {
      await run('iptables', ['-w', '-t', table, '-N', RENDEZVOUS_CHAIN]).catch(() => undefined);
    }
    const jump = [
      'PREROUTING',
      '-p',
      'tcp',
      '-m',
      'comment',
      '--comment',
      RENDEZVOUS_COMMENT,
      '-j',
      RENDEZVOUS_CHAIN,
    ];
    try {
      await run('iptables', ['-w', '-t', 'mangle', '-C', ...jump]);
    } catch {
      await run('iptables', ['-w', '-t', 'mangle', '-I', ...jump]);
    }
  }

  let installed: { key: string; generation: number } | null = null;
  let generation = Date.now();

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
      // The bridge's first rules jump to the rendezvous chain: it must exist before they name it.
      await rendezvousChains().catch((err: unknown) => {
        if (enforced) throw new Error(`rendezvous chains: ${describe(err)}`);
      });
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

    async rendezvous(tag, rules) {
      await this.probe();
      if (!ipv4) return;
      const key = JSON.stringify(rules);
      const comment = (g: number) => ['-m', 'comment', '--comment', `${RENDEZVOUS_COMMENT} ${tag} g${g}`];
      const argsOf = (rule: RendezvousRule, g: number) => {
        const jump = rule.spec.indexOf('-j');
        return [...rule.spec.slice(0, jump), ...comment(g), ...rule.spec.slice(jump)];
      };
      if (installed?.key === key) {
        const present = await Promise.all(
          rules.map((r) =>
            run('iptables', [
              '-w',
              '-t',
              r.table,
              '-C',
              RENDEZVOUS_CHAIN,
              ...argsOf(r, installed!.generation),
            ]).then(
              () => true,
              () => false,
            ),
          ),
        );
        if (present.every(Boolean)) return;
      }
      await rendezvousChains();
      generation += 1;
      const errors: string[] = [];
      // Admissions at the top (in order), drops at the bottom: every host's admissions come before any drop.
      for (const rule of [...rules].filter((r) => r.first).reverse()) {
        await run('iptables', [
          '-w',
          '-t',
          rule.table,
          '-I',
          RENDEZVOUS_CHAIN,
          '1',
          ...argsOf(rule, generation),
        ]).catch((err: unknown) => errors.push(describe(err)));
      }
      for (const rule of rules.filter((r) => !r.first)) {
        await run('iptables', [
          '-w',
          '-t',
          rule.table,
          '-A',
          RENDEZVOUS_CHAIN,
          ...argsOf(rule, generation),
        ]).catch((err: unknown) => errors.push(describe(err)));
      }
      // Then this host's rules of earlier generations go.
      const current = `${RENDEZVOUS_COMMENT} ${tag} g${generation}`;
      for (const table of ['filter', 'mangle'] as const) {
        const listing = (await run('iptables', ['-w', '-t', table, '-S', RENDEZVOUS_CHAIN])) ?? '';
        for (const line of listing.split('\n')) {
          if (!line.includes(`${RENDEZVOUS_COMMENT} ${tag} g`) || line.includes(`"${current}"`)) continue;
          const args = splitRuleLine(line);
          if (args[0] !== '-A') continue;
          await run('iptables', ['-w', '-t', table, '-D', ...args.slice(1)]).catch(() => undefined);
        }
      }
      if (errors.length > 0) throw new Error(`rendezvous rules: ${errors.join('; ')}`);
      installed = { key, generation };
    },
  };
}
