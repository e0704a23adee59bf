/**
 * Polls `check` until it returns a value other than false, null or undefined, and resolves to it. A
 * check that throws counts as "not yet"; when time runs out the error names `what` and the last
 * failure, so a test that waits on a broken condition says why rather than only that it timed out.
 */
export async function waitFor<T>(
  what: string,
  check: () => T | Promise<T>,
  timeoutMs = 120_000,
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
