import { parseArgs } from 'node:util';
import { type Command, Context, type Input, type Io, type OptionSpec } from './command.ts';
import { COMMANDS } from './commands/index.ts';
import { CliError, EXIT, UsageError } from './exit-codes.ts';
import { commandHelp, groupHelp, mainHelp } from './help.ts';

export const GLOBAL_OPTIONS: Record<string, OptionSpec> = {
  json: { type: 'boolean', description: 'Print the API answer as JSON (for scripts)' },
  profile: { type: 'string', short: 'p', description: 'Use this named profile', value: 'name' },
  help: { type: 'boolean', short: 'h', description: 'Show help' },
};

/** The command named by the first words of argv (options may come before it), and the words left. */
export function findCommand(argv: string[]): { command: Command | null; words: string[]; rest: string[] } {
  const words: string[] = [];
  const rest: string[] = [];
  let i = 0;
  for (; i < argv.length; i++) {
    const token = argv[i]!;
    if (token === '--') break;
    if (token.startsWith('-')) {
      rest.push(token);
      if ((token === '--profile' || token === '-p') && i + 1 < argv.length) rest.push(argv[++i]!);
      continue;
    }
    const candidate = [...words, token];
    if (!COMMANDS.some((c) => startsWith(c.path, candidate))) break;
    words.push(token);
  }
  const command = COMMANDS.find((c) => sameWords(c.path, words)) ?? null;
  return { command, words, rest: [...rest, ...argv.slice(i)] };
}

const startsWith = (path: string[], prefix: string[]) => prefix.every((word, i) => path[i] === word);
const sameWords = (a: string[], b: string[]) => a.length === b.length && startsWith(a, b);

function parse(command: Command, tokens: string[]): Input & { globals: Record<string, unknown> } {
  const specs = { ...GLOBAL_OPTIONS, ...command.options };
  const options = Object.fromEntries(
    Object.entries(specs).map(([name, spec]) => [
      name,
      {
        type: spec.type,
        ...(spec.short ? { short: spec.short } : {}),
        ...(spec.multiple ? { multiple: true } : {}),
      },
    ]),
  );
  let own = tokens;
  let passed: string[] = [];
  if (command.passThrough) {
    // Options up to the first positional are the CLI's; from there on everything is the remote command's.
    const split = firstPositional(tokens, specs);
    own = tokens.slice(0, split + 1);
    passed = tokens.slice(split + 1);
    if (passed[0] === '--') passed = passed.slice(1);
  }
  let parsed: ReturnType<typeof parseArgs>;
  try {
    parsed = parseArgs({ args: own, options, allowPositionals: true, strict: true });
  } catch (error) {
    throw new UsageError(
      `${(error as Error).message.split('\n')[0]} (see anvil ${command.path.join(' ')} --help)`,
    );
  }
  const { json, profile, help, ...values } = parsed.values;
  return {
    values,
    positionals: [...parsed.positionals, ...passed],
    globals: { json, profile, help },
  };
}

function firstPositional(tokens: string[], specs: Record<string, OptionSpec>): number {
  for (let i = 0; i < tokens.length; i++) {
    const token = tokens[i]!;
    if (token === '--') return Math.min(i + 1, tokens.length);
    if (!token.startsWith('-') || token === '-') return i;
    if (token.includes('=')) continue;
    const name = token.startsWith('--')
      ? token.slice(2)
      : Object.entries(specs).find(([, spec]) => spec.short === token.slice(1))?.[0];
    if (name && specs[name]?.type === 'string') i += 1;
  }
  return tokens.length;
}

/** Runs one command line; answers the exit code. Errors are one line on stderr, never a stack trace. */
export async function runCli(argv: string[], io: Io): Promise<number> {
  const { command, words, rest } = findCommand(argv);
  const wantsHelp = rest.includes('--help') || rest.includes('-h');
  try {
    if (!command) {
      if (words.length === 0 && argv.filter((a) => !a.startsWith('-')).length === 0) {
        io.stdout.write(mainHelp());
        return wantsHelp || argv.length === 0 ? EXIT.ok : EXIT.usage;
      }
      if (words.length > 0 && (wantsHelp || rest.length === 0)) {
        io.stdout.write(groupHelp(words));
        return wantsHelp ? EXIT.ok : EXIT.usage;
      }
      const unknown = [...words, rest.find((a) => !a.startsWith('-')) ?? ''].join(' ').trim();
      throw new UsageError(`unknown command "${unknown}" (see anvil --help)`);
    }
    const own = command.passThrough
      ? rest.slice(0, firstPositional(rest, { ...GLOBAL_OPTIONS, ...command.options }) + 1)
      : rest;
    if (own.includes('--help') || own.includes('-h')) {
      io.stdout.write(commandHelp(command));
      return EXIT.ok;
    }
    const input = parse(command, rest);
    const [min, max] = command.arity ?? [0, 0];
    if (input.positionals.length < min || input.positionals.length > max) {
      throw new UsageError(
        `anvil ${command.path.join(' ')} takes ${command.args ?? 'no arguments'} (see anvil ${command.path.join(' ')} --help)`,
      );
    }
    const context = new Context(
      io,
      input.globals['json'] === true,
      input.globals['profile'] as string | undefined,
    );
    return (await command.run(context, input)) ?? EXIT.ok;
  } catch (error) {
    return report(io, error);
  }
}

function report(io: Io, error: unknown): number {
  if (error instanceof CliError) {
    io.stderr.write(`anvil: ${error.message}\n`);
    return error.exitCode;
  }
  // Unexpected: still one line, with what happened, so a user can report it.
  io.stderr.write(`anvil: unexpected error: ${(error as Error)?.message ?? String(error)}\n`);
  return EXIT.failure;
}
