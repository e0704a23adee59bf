/**
 * What one exec in a container returned. Its own module: ContainerExec runs execs through a
 * ContainerShell, and the shell answers in the same shape, so neither imports the other for it.
 */
export interface ExecResult {
  code: number | null;
  stdout: Buffer;
  stderr: string;
}
