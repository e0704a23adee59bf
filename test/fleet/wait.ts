/** Polls `check` until it returns a value that is not false/null/undefined; fails with `what` after `timeoutMs`. */
export async function waitFor<T>(
  what: string,
  check: () => T | Promise<T>,
  timeoutMs = 20_000,
  everyMs = 100,
): Promise<Exclude<T, false | null | undefined>> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown = null;
  for (;;) {
    try {
      const value = await check();
      if (value !== false && value !== null && value !== undefined) {
        return value as Exclude<T, false | null | undefined>;
      }
      lastError = null;
    } catch (error) {
      lastError = error;
    }
    if (Date.now() > deadline) {
      const why = lastError ? `: ${(lastError as Error).message}` : '';
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${why}`);
    }
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
}

/** Appends a progress line to $ANVIL_FLEET_PROGRESS (if set): long fleet tests say where they are. */
export function step(message: string): void {
  const file = process.env['ANVIL_FLEET_PROGRESS'];
  if (!file) return;
  import('node:fs').then(({ appendFileSync }) =>
    appendFileSync(file, `${new Date().toISOString()} ${message}\n`),
  );
}
