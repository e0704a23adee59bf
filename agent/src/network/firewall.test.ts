import type { WorkloadSpec } from '@anvil/shared/protocol';
import { describe, expect, it } from 'vitest';
import { bridgeNameOf, networkNameOf } from './account-networks.ts';
import { bridgeRules, type CommandRunner, createIptablesFirewall, splitRuleLine } from './firewall.ts';
import { rendezvousRules } from './rendezvous-rules.ts';

/** A host without the iptables binaries: every command fails as spawn does (ENOENT). */
const missing: CommandRunner = async () => {
  throw Object.assign(new Error('spawn iptables ENOENT'), { code: 'ENOENT' });
};

describe('firewall', () => {
  it('fences a bridge: host input except replies, link-local, and other account bridges', () => {
    const rules = bridgeRules('anvtabc');
    expect(rules.map((r) => `${r.binary} ${r.chain} ${r.spec.join(' ')}`)).toEqual([
      'iptables INPUT -i anvtabc -m comment --comment anvil-rendezvous anvtabc -j ANVIL-RENDEZVOUS',
      'iptables INPUT -i anvtabc -m conntrack ! --ctstate ESTABLISHED,RELATED -m comment --comment anvil-isolation anvtabc -j DROP',
      'ip6tables INPUT -i anvtabc -m conntrack ! --ctstate ESTABLISHED,RELATED -m comment --comment anvil-isolation anvtabc -j DROP',
      'iptables DOCKER-USER -i anvtabc -m comment --comment anvil-rendezvous anvtabc -j ANVIL-RENDEZVOUS',
      'iptables DOCKER-USER -i anvtabc -d 169.254.0.0/16 -m comment --comment anvil-isolation anvtabc -j DROP',
      'iptables DOCKER-USER -i anvtabc -o anvtabc -m comment --comment anvil-isolation anvtabc -j RETURN',
      'iptables DOCKER-USER -i anvtabc -o anvt+ -m comment --comment anvil-isolation anvtabc -j DROP',
    ]);
  });

  it('admits a gang worker to its rank 0 from its own account bridge only, and rank 0 from peer hosts only', () => {
    const spec = (accountId: string, rendezvous: WorkloadSpec['rendezvous']) =>
      ({ workloadId: `w-${accountId}`, accountId, rendezvous }) as WorkloadSpec;
    const rules = rendezvousRules(
      [
        spec('acc_a', {
          publish: [29500],
          peers: ['10.0.0.2'],
          dial: [{ address: '10.0.0.1', port: 29500 }],
        }),
        spec('acc_b', null),
      ],
      (s) => `anvt-${s.accountId}`,
      '10.0.0.1',
    );
    expect(rules.map((r) => `${r.table} ${r.first ? 'top' : 'end'} ${r.spec.join(' ')}`)).toEqual([
      'filter top -i anvt-acc_a -d 10.0.0.1/32 -p tcp --dport 29500 -j ACCEPT',
      'filter end -d 10.0.0.1/32 -p tcp --dport 29500 -j DROP',
      'mangle top -s 10.0.0.2/32 -d 10.0.0.1/32 -p tcp --dport 29500 -j RETURN',
      'mangle top -i anvt+ -d 10.0.0.1/32 -p tcp --dport 29500 -j RETURN',
      'mangle top -i lo -d 10.0.0.1/32 -p tcp --dport 29500 -j RETURN',
      'mangle end -d 10.0.0.1/32 -p tcp --dport 29500 -j DROP',
    ]);
    expect(
      splitRuleLine(
        '-A ANVIL-RENDEZVOUS -d 10.0.0.1/32 -m comment --comment "anvil-rendezvous abc g1" -j DROP',
      ),
    ).toEqual([
      '-A',
      'ANVIL-RENDEZVOUS',
      '-d',
      '10.0.0.1/32',
      '-m',
      'comment',
      '--comment',
      'anvil-rendezvous abc g1',
      '-j',
      'DROP',
    ]);
  });

  it('says loudly that isolation is not enforced on a host without iptables, and runs nothing more', async () => {
    const calls: string[] = [];
    const firewall = createIptablesFirewall(async (file, args) => {
      calls.push(`${file} ${args.join(' ')}`);
      return missing(file, args);
    });
    expect(await firewall.probe()).toEqual({
      enforced: false,
      reason: 'iptables: not installed; ip6tables: not installed',
    });
    const probes = calls.length;
    await firewall.ensure('anvtabc');
    expect(calls.length).toBe(probes);
  });

  it('names networks per account and bridges per host and network, within 15 characters', () => {
    expect(networkNameOf({ accountId: 'acc_1' })).toBe('anvil-acct-acc_1');
    expect(networkNameOf({})).toBeNull();
    const a = bridgeNameOf('host_a', 'anvil-acct-acc_1');
    expect(a).toMatch(/^anvt[0-9a-f]{11}$/);
    expect(bridgeNameOf('host_b', 'anvil-acct-acc_1')).not.toBe(a);
  });
});
