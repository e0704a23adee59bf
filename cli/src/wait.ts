/** Polls `check` (1 s apart) until it answers something or `timeoutMs` passes; null on timeout. */
export async function waitUntil<T>(timeoutMs: number, check: () => Promise<T | null>): Promise<T | null> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== null) return value;
    if (Date.now() >= deadline) return null;
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}
