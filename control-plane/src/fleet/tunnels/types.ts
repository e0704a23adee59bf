import type { Duplex, Readable, Writable } from 'node:stream';

/**
 * Reverse tunnels into a workload's container, through the agent of the host it runs on (the agent
 * dials out, so hosts behind NAT work). The HTTPS port proxy and the SSH relay build on this; the
 * host fleet implements it (agents/), and nothing above it knows how the bytes travel.
 */
export interface TunnelOpener {
  /**
   * A byte stream to `port` of the workload's container at its address on the Docker network (no host
   * port needed). Rejects with ApiError HOST_NOT_CONNECTED / WORKLOAD_NOT_FOUND / AGENT_COMMAND_FAILED
   * (connection refused inside the container) / AGENT_TIMEOUT. Destroying the stream closes the tunnel.
   * Through an agent it is the agent's upgraded tunnel socket itself (net.Socket, or tls.TLSSocket when
   * the control plane serves TLS); end() is a half close, the container's reply still arrives.
   */
  openStream(workloadId: string, port: number, options?: { signal?: AbortSignal }): Promise<Duplex>;
  /** A process inside the workload's container (docker exec), with or without a PTY. */
  openExec(workloadId: string, options: ExecOptions): Promise<ExecSession>;
}

export interface ExecOptions {
  /** argv, never a shell string. */
  command: string[];
  tty: boolean;
  env?: Record<string, string>;
  /** Initial PTY size (tty only). */
  cols?: number;
  rows?: number;
  user?: string;
  workingDir?: string;
}

export interface ExecSession {
  /** Ending stdin (stdin.end()) closes the process's standard input. */
  stdin: Writable;
  /** With a PTY, stdout carries the terminal's whole output and stderr stays empty. */
  stdout: Readable;
  stderr: Readable;
  /** PTY window change (tty only). */
  resize(cols: number, rows: number): void;
  /** Sends a signal (TERM, INT, KILL, HUP, ...) to the process. */
  signal(name: string): void;
  /** Settles once the process ended: its exit code, or null when it could not be learned. */
  exit: Promise<{ code: number | null }>;
  /** Tears the session down (kills the process when it still runs). */
  close(): void;
}
