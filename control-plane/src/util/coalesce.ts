/**
 * Wraps an async task so that callers share runs: a call while nothing runs starts a run; a call while one
 * runs gets the single follow-up run queued behind it (so whatever the caller added before calling is
 * included), and every further call before that follow-up starts shares it. At most one run at a time.
 */
export function coalesced(task: () => Promise<void>): () => Promise<void> {
  let running: Promise<void> | null = null;
  let queued: Promise<void> | null = null;

  const launch = (): Promise<void> => {
    const run: Promise<void> = task().finally(() => {
      if (running === run) running = null;
    });
    running = run;
    return run;
  };

  return () => {
    if (queued) return queued;
    if (!running) return launch();
    queued = running
      .catch(() => {})
      .then(() => {
        queued = null;
        return launch();
      });
    return queued;
  };
}
