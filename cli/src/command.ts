import type { Readable } from 'node:stream';
import { ApiClient } from './api.ts';
import { ConfigStore, type Credentials, configPath, type Env, resolveCredentials } from './config.ts';
import { json } from './output.ts';

export interface OptionSpec {
  type: 'string' | 'boolean';
  short?: string;
  multiple?: boolean;
  /** Shown in --help; `value` names the option's argument there. */
  description: string;
  value?: string;
}

export type Values = Record<string, string | boolean | Array<string | boolean> | undefined>;

export interface Input {
  values: Values;
  positionals: string[];
}

/** A command: its words (`clusters list`), its help and its options; run answers an exit code or nothing (0). */
export interface Command {
  path: string[];
  summary: string;
  /** The arguments after the command's words, as help shows them: `<cluster> [command...]`. */
  args?: string;
  /** How many positionals it takes: [minimum, maximum] (Infinity for "the rest"). */
  arity?: [number, number];
  description?: string;
  examples: string[];
  options?: Record<string, OptionSpec>;
  /** Hands everything after the command's positionals to it untouched (ssh's remote command). */
  passThrough?: boolean;
  run(context: Context, input: Input): Promise<number | undefined>;
}

/** What a command may touch: streams, environment and network are given, so tests run commands in-process. */
export interface Io {
  stdout: { write(text: string | Uint8Array): unknown; isTTY?: boolean; columns?: number };
  stderr: { write(text: string | Uint8Array): unknown; isTTY?: boolean };
  stdin: Readable;
  env: Env;
  fetch?: typeof fetch;
}

export class Context {
  readonly store: ConfigStore;

  constructor(
    readonly io: Io,
    readonly jsonOutput: boolean,
    readonly profileFlag: string | undefined,
  ) {
    this.store = new ConfigStore(configPath(io.env), (line) => this.warn(line));
  }

  get env(): Env {
    return this.io.env;
  }

  credentials(): Credentials {
    return resolveCredentials(this.store.read(), this.io.env, this.profileFlag);
  }

  api(): ApiClient {
    const { url, key } = this.credentials();
    return new ApiClient(url, key, this.io.fetch);
  }

  out(text: string): void {
    this.io.stdout.write(text);
  }

  warn(line: string): void {
    this.io.stderr.write(`anvil: ${line}\n`);
  }

  /** --json prints `data` as JSON; otherwise `human()` renders it for people. */
  show(data: unknown, human: () => string): void {
    this.out(this.jsonOutput ? json(data) : human());
  }
}
