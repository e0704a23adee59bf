import { readFile } from 'node:fs/promises';
import type { TunnelSignal } from '@anvil/shared/protocol';
import type Dockerode from 'dockerode';

/**
 * Docker has no API to signal an exec'd process. Exec inspect names its pid in the host's pid
 * namespace; the agent, running on the host, signals it directly. When it may not (not root, another
 * user's process), a second exec runs `kill` inside the container with the pid as the container sees
 * it (the last NSpid entry of /proc/<pid>/status). Limits, documented in the agent README: the agent
 * must share the host's pid namespace (a remote DOCKER_HOST or an agent in its own pid namespace cannot
 * signal), the fallback needs a `kill` in the image, and a pid reused between the inspect and the
 * kill (microseconds) would be hit: the inspect says Running just before.
 */
export async function signalExec(
  docker: Dockerode,
  containerId: string,
  exec: Dockerode.Exec,
  signal: TunnelSignal,
): Promise<void> {
  const info = await exec.inspect();
  if (!info.Running) return;
  const pid = info.Pid;
  let status: string;
  try {
    status = await readFile(`/proc/${pid}/status`, 'utf8');
  } catch {
    throw new Error(
      `cannot signal the process: pid ${pid} is not visible to the agent (is it in the host's pid namespace?)`,
    );
  }
  try {
    process.kill(pid, `SIG${signal}` as NodeJS.Signals);
    return;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ESRCH') return;
    if ((error as NodeJS.ErrnoException).code !== 'EPERM') throw error;
  }
  const nsPids = /^NSpid:\s*(.+)$/m.exec(status)?.[1]?.trim().split(/\s+/);
  const inner = nsPids?.[nsPids.length - 1];
  if (!inner) throw new Error(`cannot signal pid ${pid}: its pid inside the container is unknown`);
  const killer = await docker.getContainer(containerId).exec({
    Cmd: ['kill', `-${signal}`, inner],
    User: '0',
    AttachStdout: false,
    AttachStderr: false,
  });
  await killer.start({ Detach: true });
}
