import { spawn } from 'node:child_process';
import { constants } from 'node:os';
import type { Command, Values } from '../command.ts';
import { CliError, EXIT, UsageError } from '../exit-codes.ts';
import { type ClusterView, findCluster, listClusters } from './resolve.ts';

const SSH_OPTIONS = {
  identity: { type: 'string' as const, short: 'i', description: 'Private key file for ssh', value: 'file' },
  'ssh-option': {
    type: 'string' as const,
    short: 'o',
    multiple: true,
    description: 'An ssh -o option, e.g. StrictHostKeyChecking=accept-new',
    value: 'option',
  },
};

function connectionOf(cluster: ClusterView): NonNullable<ClusterView['ssh_connection']> {
  if (!cluster.ssh_connection) {
    throw new CliError(
      `cluster ${cluster.name} (${cluster.id}) has no SSH: create it with --ssh (ssh_enabled), and it must be running`,
      EXIT.refused,
    );
  }
  return cluster.ssh_connection;
}

function sshArgs(values: Values): string[] {
  const args: string[] = [];
  if (values['identity']) args.push('-i', values['identity'] as string);
  for (const option of (values['ssh-option'] as string[] | undefined) ?? []) args.push('-o', option);
  return args;
}

/**
 * Runs the system ssh with the terminal handed over; answers its exit status (the remote command's, or 255
 * when ssh failed). Ctrl-C belongs to ssh and the remote side, so this process ignores SIGINT meanwhile;
 * SIGTERM and SIGHUP are passed on, so stopping anvil never leaves an ssh (and its forward) behind.
 */
export function execSsh(args: string[], binary = 'ssh'): Promise<number> {
  return new Promise((resolve, reject) => {
    const child = spawn(binary, args, { stdio: 'inherit' });
    const ignore = () => {};
    const pass = (signal: NodeJS.Signals) => child.kill(signal);
    process.on('SIGINT', ignore);
    process.on('SIGTERM', pass);
    process.on('SIGHUP', pass);
    const release = () => {
      process.off('SIGINT', ignore);
      process.off('SIGTERM', pass);
      process.off('SIGHUP', pass);
    };
    child.on('error', (error) => {
      release();
      reject(
        new CliError(
          (error as NodeJS.ErrnoException).code === 'ENOENT'
            ? `${binary} is not installed: install OpenSSH's client`
            : `could not run ${binary}: ${error.message}`,
          EXIT.failure,
        ),
      );
    });
    child.on('exit', (code, signal) => {
      release();
      resolve(code ?? 128 + (signal ? (constants.signals[signal] ?? 1) : 1));
    });
  });
}

const ssh: Command = {
  path: ['ssh'],
  summary: "Open a shell (or run a command) in a cluster over the control plane's SSH relay",
  args: '<cluster> [command...]',
  arity: [1, Number.POSITIVE_INFINITY],
  passThrough: true,
  description:
    'Runs the system ssh against the relay with the cluster as user (ssh -p <port> <cluster id>@<host>), so your ' +
    'ssh keys, agent and config apply; add your public key once with POST /v2/accounts/profile/ssh-keys. ' +
    "Everything after the cluster is the remote command. Exits with the remote command's status.",
  options: SSH_OPTIONS,
  examples: [
    'anvil ssh dev',
    'anvil ssh dev nvidia-smi',
    "anvil ssh -i ~/.ssh/work dev -- 'cd /workspace && ls -la'",
  ],
  async run(context, { values, positionals }) {
    const [name, ...remote] = positionals;
    const target = connectionOf(await findCluster(context.api(), name!));
    const args = ['-p', String(target.port), ...sshArgs(values), `${target.username}@${target.host}`];
    if (remote.length) args.push('--', ...remote);
    return execSsh(args, context.env['ANVIL_SSH_BINARY'] || 'ssh');
  },
};

/** A cluster name as an ssh Host alias: letters, digits, '.', '_' and '-' (ssh patterns treat *?! specially). */
export function hostAlias(name: string): string {
  return name.replace(/[^A-Za-z0-9._-]+/g, '-');
}

export function sshConfigBlock(cluster: ClusterView, identity: string | undefined): string {
  const c = connectionOf(cluster);
  const aliases = [...new Set([hostAlias(cluster.name), cluster.id])].join(' ');
  const lines = [
    `# Anvil cluster ${cluster.name} (${cluster.id})`,
    `Host ${aliases}`,
    `  HostName ${c.host}`,
    `  Port ${c.port}`,
    `  User ${c.username}`,
  ];
  if (identity) lines.push(`  IdentityFile ${identity}`, '  IdentitiesOnly yes');
  return `${lines.join('\n')}\n`;
}

const sshConfig: Command = {
  path: ['ssh-config'],
  summary: 'Print ssh Host blocks for your clusters, for ~/.ssh/config',
  args: '[cluster...]',
  arity: [0, Number.POSITIVE_INFINITY],
  description:
    'One block per cluster with SSH (all, or the ones named), named by cluster name and id, so ssh, scp, rsync ' +
    'and VS Code Remote-SSH reach a cluster by its name.',
  options: {
    identity: { type: 'string', short: 'i', description: 'Add IdentityFile to each block', value: 'file' },
  },
  examples: [
    'anvil ssh-config >> ~/.ssh/config',
    'anvil ssh-config dev > ~/.ssh/config.d/anvil && ssh dev',
    'rsync -av ./data/ dev:/workspace/data/',
  ],
  async run(context, { values, positionals }) {
    const api = context.api();
    const clusters = positionals.length
      ? await Promise.all(positionals.map((n) => findCluster(api, n)))
      : (await listClusters(api)).filter((c) => c.ssh_connection);
    const identity = values['identity'] as string | undefined;
    context.show(
      clusters.map((c) => ({ name: c.name, id: c.id, ...connectionOf(c) })),
      () => clusters.map((c) => sshConfigBlock(c, identity)).join('\n'),
    );
    return EXIT.ok;
  },
};

export function parseForward(spec: string): { local: number; remote: number } {
  const match = /^(\d{1,5}):(\d{1,5})$/.exec(spec) ?? /^(\d{1,5})$/.exec(spec);
  const local = Number(match?.[1]);
  const remote = Number(match?.[2] ?? match?.[1]);
  if (!match || local > 65535 || remote < 1 || remote > 65535) {
    throw new UsageError(
      `port-forward takes <local port>:<cluster port> (or one port for both), got "${spec}"`,
    );
  }
  return { local, remote };
}

const portForward: Command = {
  path: ['port-forward'],
  summary: "Listen on a local port and forward it to a cluster's port",
  args: '<cluster> <local>:<remote>',
  arity: [2, 2],
  description:
    "A local TCP listener (on 127.0.0.1, or --address) whose connections reach the cluster's port through the " +
    "SSH relay's port forwarding (ssh -N -L): any TCP protocol works, not only HTTP, and the relay's SSH " +
    'authorisation applies. The server in the container must listen on 0.0.0.0. Stops on Ctrl-C. ' +
    "For HTTP ports mapped with --port, the HTTPS proxy (the cluster's proxy_url) needs no forward at all.",
  options: {
    ...SSH_OPTIONS,
    address: { type: 'string', description: 'Local address to listen on (default 127.0.0.1)', value: 'ip' },
  },
  examples: [
    'anvil port-forward dev 8888:8888   # Jupyter on http://localhost:8888',
    'anvil port-forward dev 5433:5432',
  ],
  async run(context, { values, positionals }) {
    const { local, remote } = parseForward(positionals[1]!);
    const target = connectionOf(await findCluster(context.api(), positionals[0]!));
    const address = (values['address'] as string | undefined) ?? '127.0.0.1';
    const bind = address.includes(':') ? `[${address}]` : address;
    context.warn(`forwarding ${address}:${local} to port ${remote} of ${positionals[0]} (Ctrl-C to stop)`);
    return execSsh(
      [
        '-N',
        '-o',
        'ExitOnForwardFailure=yes',
        '-L',
        `${bind}:${local}:localhost:${remote}`,
        '-p',
        String(target.port),
        ...sshArgs(values),
        `${target.username}@${target.host}`,
      ],
      context.env['ANVIL_SSH_BINARY'] || 'ssh',
    );
  },
};

export const sshCommands = [ssh, sshConfig, portForward];
