// What a bench server reports about itself over IPC when the bench sends 'cpu': its CPU time so far
// (µs, user + system) and how late its event loop ran since the previous ask (p99 and max, ms), so a
// latency tail can be told apart: a loop blocked by the process's own work shows here, a slow
// client or a busy machine does not.
import { monitorEventLoopDelay } from 'node:perf_hooks';

export interface ServerUsage {
  user: number;
  system: number;
  loopDelay: { p99Ms: number; maxMs: number };
}

export function answerUsageRequests(): void {
  const delay = monitorEventLoopDelay({ resolution: 1 });
  delay.enable();
  process.on('message', (message) => {
    if (message !== 'cpu') return;
    const { user, system } = process.cpuUsage();
    const usage: ServerUsage = {
      user,
      system,
      loopDelay: { p99Ms: delay.percentile(99) / 1e6, maxMs: delay.max / 1e6 },
    };
    delay.reset();
    process.send?.(usage);
  });
}
