import type { Command, OptionSpec } from './command.ts';
import { COMMANDS } from './commands/index.ts';

const GLOBALS = `Global options:
  --json              Print the API answer as JSON (for scripts)
  -p, --profile NAME  Use this named profile (default: ANVIL_PROFILE, else the one of the last login)
  -h, --help          Show help`;

export const EXIT_CODES_HELP = `Exit codes:
  0  success                      5  not found (404)
  1  failure (5xx, unexpected)    6  refused: invalid input or state (400, 409, 413, 422)
  2  bad command line             7  rate limited (429)
  3  not logged in / key refused  8  control plane unreachable
  4  forbidden (403)              9  the job or upload ran and failed
  anvil ssh exits with the remote command's status (255: ssh itself failed).`;

const ENVIRONMENT = `Environment:
  ANVIL_URL, ANVIL_API_KEY  override the profile's control plane and key
  ANVIL_PROFILE             the profile to use when --profile is not given
  XDG_CONFIG_HOME           profiles live in $XDG_CONFIG_HOME/anvil/config.json (default ~/.config)`;

function usageOf(command: Command): string {
  return `anvil ${command.path.join(' ')}${command.options ? ' [options]' : ''}${command.args ? ` ${command.args}` : ''}`;
}

function optionLines(options: Record<string, OptionSpec>): string[] {
  const left = Object.entries(options).map(([name, spec]) => {
    const short = spec.short ? `-${spec.short}, ` : '    ';
    const value = spec.type === 'string' ? ` ${(spec.value ?? 'value').toUpperCase()}` : '';
    return `${short}--${name}${value}`;
  });
  const width = Math.max(...left.map((l) => l.length)) + 2;
  return Object.values(options).map(
    (spec, i) => `  ${left[i]!.padEnd(width)}${spec.description}${spec.multiple ? ' (repeatable)' : ''}`,
  );
}

export function commandHelp(command: Command): string {
  const parts = [`Usage: ${usageOf(command)}`, '', command.summary];
  if (command.description) parts.push('', command.description);
  if (command.options) parts.push('', 'Options:', ...optionLines(command.options));
  parts.push('', GLOBALS);
  if (command.examples.length) parts.push('', 'Examples:', ...command.examples.map((e) => `  ${e}`));
  return `${parts.join('\n')}\n`;
}

function listing(commands: Command[]): string[] {
  const width = Math.max(...commands.map((c) => c.path.join(' ').length)) + 2;
  return commands.map((c) => `  ${c.path.join(' ').padEnd(width)}${c.summary}`);
}

export function groupHelp(words: string[]): string {
  const commands = COMMANDS.filter((c) => words.every((w, i) => c.path[i] === w));
  return `Usage: anvil ${words.join(' ')} <command>\n\nCommands:\n${listing(commands).join('\n')}\n\nRun anvil ${words.join(' ')} <command> --help for its options and examples.\n`;
}

export function mainHelp(): string {
  return `anvil: the command-line client of an Anvil GPU cloud

Usage: anvil <command> [options]

Commands:
${listing(COMMANDS.filter((c) => !c.path[0]!.startsWith('__'))).join('\n')}

${GLOBALS}

${EXIT_CODES_HELP}

${ENVIRONMENT}

Examples:
  anvil login --url https://anvil.example.com --key anv_live_…
  anvil clusters create --name dev --image pytorch/pytorch --gpu-type H100 --ssh
  anvil ssh dev nvidia-smi
  anvil ssh-config >> ~/.ssh/config && scp model.bin dev:/workspace/
  anvil clusters list --json | jq -r '.[].id'

Run anvil <command> --help for a command's options and examples.
`;
}
