import type { Command } from '../command.ts';
import { EXIT, UsageError } from '../exit-codes.ts';
import { listClusters } from './resolve.ts';

export const BASH = `# anvil completion for bash: eval "$(anvil completion bash)" in ~/.bashrc
_anvil() {
  local cur=\${COMP_WORDS[COMP_CWORD]}
  local IFS=$'\\n'
  COMPREPLY=($(compgen -W "$(anvil __complete "\${COMP_WORDS[@]:1:COMP_CWORD-1}" 2>/dev/null)" -- "$cur"))
}
complete -o default -F _anvil anvil
`;

export const ZSH = `#compdef anvil
# anvil completion for zsh: eval "$(anvil completion zsh)" in ~/.zshrc (after compinit)
_anvil() {
  local -a candidates
  candidates=("\${(@f)$(anvil __complete "\${(@)words[2,CURRENT-1]}" 2>/dev/null)}")
  candidates=(\${candidates:#})
  if (( \${#candidates} )); then compadd -a candidates; else _files; fi
}
compdef _anvil anvil
`;

const completion: Command = {
  path: ['completion'],
  summary: 'Print the shell completion script for bash or zsh',
  args: '<bash|zsh>',
  arity: [1, 1],
  examples: [
    'echo \'eval "$(anvil completion bash)"\' >> ~/.bashrc',
    'echo \'eval "$(anvil completion zsh)"\' >> ~/.zshrc',
  ],
  async run(context, { positionals }) {
    const shell = positionals[0];
    if (shell !== 'bash' && shell !== 'zsh')
      throw new UsageError(`completion for bash or zsh, not "${shell}"`);
    context.out(shell === 'bash' ? BASH : ZSH);
    return EXIT.ok;
  },
};

/** What may follow `words`: the next command words, else the command's options and, where it takes a cluster, cluster names. */
export function completeWith(
  commands: readonly Command[],
  words: string[],
): { candidates: string[]; command: Command | null } {
  const path = words.filter((w) => !w.startsWith('-'));
  for (let length = Math.min(path.length, 2); length > 0; length--) {
    const command = commands.find((c) => c.path.length === length && c.path.every((w, i) => path[i] === w));
    if (command) {
      const options = Object.keys({ ...command.options, json: 1, profile: 1, help: 1 }).map((o) => `--${o}`);
      return { candidates: options, command };
    }
  }
  const next = commands
    .filter(
      (c) =>
        !c.path[0]!.startsWith('__') && path.every((w, i) => c.path[i] === w) && c.path.length > path.length,
    )
    .map((c) => c.path[path.length]!);
  return { candidates: [...new Set(next)], command: null };
}

export function completeCommand(commands: () => readonly Command[]): Command {
  return {
    path: ['__complete'],
    summary: 'Completion candidates (used by the completion scripts)',
    args: '[words...]',
    arity: [0, Number.POSITIVE_INFINITY],
    passThrough: true,
    examples: [],
    async run(context, { positionals }) {
      const { candidates, command } = completeWith(commands(), positionals);
      const lines = [...candidates];
      if (command?.args?.startsWith('<cluster')) {
        try {
          // A completion must not hang on a slow control plane: names are left out after 5 s.
          const timeout = new Promise<never>((_, fail) =>
            setTimeout(() => fail(new Error('timeout')), 5000).unref(),
          );
          const clusters = await Promise.race([listClusters(context.api()), timeout]);
          lines.push(...clusters.map((c) => c.name));
        } catch {
          // Not logged in or unreachable: complete without names.
        }
      }
      context.out(lines.length ? `${lines.join('\n')}\n` : '');
      return EXIT.ok;
    },
  };
}

export const completionCommand = completion;
