/**
 * How the relay hands scripts to shells already running in a container (ContainerShell's helper,
 * SpareExec's waiting exec), so that an operation costs a line on a pipe instead of a `docker exec`.
 *
 * A request is one line: fields separated by spaces, the script first, then its arguments. A path may
 * hold any byte but NUL, so each field is `x` followed by its bytes with every byte outside a small safe
 * set written as `\0ooo`, which `printf '%b'` (POSIX, busybox, dash, bash) turns back into the byte: a
 * field then never holds a space, a newline or a backslash escape the shell would see, and is never
 * empty (`x` keeps an empty argument a field). `printf '%bx'` and stripping the `x` again keeps the
 * trailing newlines that `$(...)` would drop.
 *
 * The helper's reply to each request is a header line `<exit status> <stdout bytes> <stderr bytes>`,
 * then exactly those bytes: lengths, not terminators, since listings carry any byte.
 */

/** Bytes sent as themselves: nothing `read -r`, field splitting or `%b` gives a meaning to. */
const SAFE = new Uint8Array(256);
for (const c of 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./,:=+@-') {
  SAFE[c.charCodeAt(0)] = 1;
}

/** A header longer than this is not one (three decimal numbers and two spaces). */
const MAX_HEADER_BYTES = 64;

/** One field of a request line; strings are sent as UTF-8, buffers as they are (names need not be UTF-8). */
export function encodeField(value: string | Buffer): string {
  const bytes = typeof value === 'string' ? Buffer.from(value, 'utf8') : value;
  let out = 'x';
  for (const byte of bytes) {
    if (byte === 0) throw new Error('a path or argument holds a NUL byte');
    out += SAFE[byte] ? String.fromCharCode(byte) : `\\0${byte.toString(8).padStart(3, '0')}`;
  }
  return out;
}

/** The request line for `script` run with `args` as $1, $2, ... */
export function encodeRequest(script: string, args: readonly (string | Buffer)[]): Buffer {
  return Buffer.from(`${[script, ...args].map(encodeField).join(' ')}\n`, 'latin1');
}

/**
 * Decodes a request line (its first argument) into `$anvil_1` (the script), `$anvil_2`... and
 * `$anvil_args`, the words that `eval "set -- $anvil_args"` turns into the positional parameters.
 * Fails on a line without fields. `set -f`: a field is never a glob. A field without a backslash (a
 * plain path) is taken as it is, sparing the fork of `$(printf)`.
 */
const DECODE = `anvil_decode() {
  set -f; IFS=' '; set -- $1; unset IFS; set +f
  anvil_n=0; anvil_args=
  for anvil_f; do
    anvil_n=$((anvil_n + 1))
    case $anvil_f in
      *\\\\*) anvil_v=$(printf '%bx' "$anvil_f"); anvil_v=\${anvil_v%x} ;;
      *) anvil_v=$anvil_f ;;
    esac
    eval "anvil_$anvil_n=\\\${anvil_v#x}"
    [ "$anvil_n" -gt 1 ] && anvil_args="$anvil_args \\"\\$anvil_$anvil_n\\""
  done
  [ "$anvil_n" -gt 0 ]
}`;

/**
 * The helper: runs each request in a subshell (so `cd`, `exit` and variables stay there) with stdin
 * from /dev/null (the requests' pipe is not the script's), its stdout and stderr in two fresh temporary
 * files, each open three times (written by the script, counted by `wc`, sent by `cat`) and unlinked
 * before the script runs, so nothing is left behind even when the helper is killed. (Files reused across
 * requests would save the mktemp and rm, but `wc -c` need not leave its offset at the end of a file:
 * GNU's computes the size from fstat.) A temporary directory that cannot be made ends the helper: the
 * relay then runs its requests as execs of their own.
 */
export const HELPER_SCRIPT = `${DECODE}
while IFS= read -r anvil_line; do
  if anvil_decode "$anvil_line"; then
    anvil_t=$(mktemp -d) || exit 1
    exec 4>"$anvil_t/o" 5<"$anvil_t/o" 6<"$anvil_t/o" 7>"$anvil_t/e" 8<"$anvil_t/e" 9<"$anvil_t/e" || exit 1
    rm -rf -- "$anvil_t"
    (eval "set -- $anvil_args"; eval "$anvil_1") </dev/null >&4 2>&7 4>&- 5<&- 6<&- 7>&- 8<&- 9<&-
    anvil_rc=$?
    printf '%s %s %s\\n' "$anvil_rc" $(( $(wc -c <&5) )) $(( $(wc -c <&8) ))
    cat <&6
    cat <&9
    exec 4>&- 5<&- 6<&- 7>&- 8<&- 9<&-
  else
    printf '127 0 0\\n'
  fi
done`;

/**
 * A spare exec: started ahead of need, it waits for one request line, then becomes that script (in
 * this shell, so `exec cat` replaces it and whatever follows the line on stdin is the script's stdin:
 * `read` on a pipe takes nothing past its newline). Its stdin ending first means it was not needed.
 */
export const SPARE_SCRIPT = `${DECODE}
IFS= read -r anvil_line || exit 0
anvil_decode "$anvil_line" || exit 127
eval "set -- $anvil_args"
eval "$anvil_1"`;

export interface ShellReply {
  code: number;
  stdout: Buffer;
  stderr: Buffer;
}

/** The helper printed something that is not a reply: it cannot be trusted to stay in step. */
export class ReplyError extends Error {}

/** Cuts the helper's output into replies, in the order of the requests. */
export class ReplyReader {
  #chunks: Buffer[] = [];
  #length = 0;
  #header: { code: number; out: number; err: number } | null = null;

  /** Takes output; the replies it completed. Throws ReplyError on a malformed header. */
  push(chunk: Buffer): ShellReply[] {
    this.#chunks.push(chunk);
    this.#length += chunk.length;
    const replies: ShellReply[] = [];
    for (;;) {
      if (!this.#header) {
        const joined = this.#joined();
        const newline = joined.indexOf(0x0a);
        if (newline < 0) {
          if (joined.length > MAX_HEADER_BYTES) throw new ReplyError('reply header too long');
          break;
        }
        this.#header = parseHeader(joined.subarray(0, newline).toString('latin1'));
        this.#take(newline + 1);
      }
      const { code, out, err } = this.#header;
      if (this.#length < out + err) break;
      const body = this.#take(out + err);
      this.#header = null;
      replies.push({ code, stdout: body.subarray(0, out), stderr: body.subarray(out) });
    }
    return replies;
  }

  #joined(): Buffer {
    if (this.#chunks.length > 1) this.#chunks = [Buffer.concat(this.#chunks, this.#length)];
    return this.#chunks[0] ?? Buffer.alloc(0);
  }

  #take(count: number): Buffer {
    const joined = this.#joined();
    const taken = joined.subarray(0, count);
    this.#chunks = joined.length > count ? [joined.subarray(count)] : [];
    this.#length -= count;
    return taken;
  }
}

function parseHeader(line: string): { code: number; out: number; err: number } {
  const match = /^\s*(\d+)\s+(\d+)\s+(\d+)\s*$/.exec(line);
  if (!match) throw new ReplyError(`not a reply header: ${JSON.stringify(line.slice(0, MAX_HEADER_BYTES))}`);
  return { code: Number(match[1]), out: Number(match[2]), err: Number(match[3]) };
}
