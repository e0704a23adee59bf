/** What a legacy-protocol `scp` run on the server was asked to do (the client runs it over exec). */
export interface ScpCommand {
  /** `-f`: send files to the client (a download); `-t`: receive them (an upload). */
  role: 'source' | 'sink';
  /** `-r`: directories too. */
  recursive: boolean;
  /** `-p`: modes and times travel with the files. */
  preserve: boolean;
  /** `-d`: the target must be a directory (several files were named). */
  targetIsDirectory: boolean;
  /**
   * The paths as the client wrote them, unquoted shell words: the remote shell expands them (globs,
   * `~`, quotes), as sshd's `sh -c` would.
   */
  words: string;
}

/** The flags OpenSSH's scp passes to its remote end (scp.c builds "scp [-v] [-r] [-p] [-d] -t|-f"). */
const FLAGS = new Set(['v', 'r', 'p', 'd', 't', 'f']);

/**
 * Recognises `scp [-vrpd] -t|-f [--] <paths>`, as OpenSSH's `scp -O` (and older scp) runs it; anything
 * else (another option, both or neither of -t and -f, no path) is not ours and runs as a plain command.
 */
export function parseScpCommand(command: string): ScpCommand | null {
  const match = /^\s*(?:\S*\/)?scp((?:\s+-[A-Za-z]+)+)\s+(?:--\s+)?(\S.*)$/s.exec(command);
  if (!match) return null;
  const letters = match[1]!.replace(/[\s-]/g, '');
  if ([...letters].some((letter) => !FLAGS.has(letter))) return null;
  const source = letters.includes('f');
  const sink = letters.includes('t');
  if (source === sink) return null;
  return {
    role: source ? 'source' : 'sink',
    recursive: letters.includes('r'),
    preserve: letters.includes('p'),
    targetIsDirectory: letters.includes('d'),
    words: match[2]!.trimEnd(),
  };
}
