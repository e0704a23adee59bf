import { readFile } from 'node:fs/promises';
import { vi } from 'vitest';

const cpuLine = async () => (await readFile('/proc/stat', 'utf8')).split('\n', 1)[0];

/**
 * Resolves once the kernel's CPU counters (the first line of /proc/stat) moved on from when it was
 * called: a CPU sample taken before and one taken after span a non-empty interval, so a CPU percentage
 * over them exists. Instead of sleeping "long enough" for a tick.
 */
export async function cpuTicksAdvanced(): Promise<void> {
  const before = await cpuLine();
  await vi.waitFor(
    async () => {
      if ((await cpuLine()) === before) throw new Error('the CPU counters have not moved');
    },
    { timeout: 10_000, interval: 5 },
  );
}
