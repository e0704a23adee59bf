export { waitFor } from '../../control-plane/src/testing/wait.ts';

/** Appends a progress line to $ANVIL_FLEET_PROGRESS (if set): long fleet tests say where they are. */
export function step(message: string): void {
  const file = process.env['ANVIL_FLEET_PROGRESS'];
  if (!file) return;
  import('node:fs').then(({ appendFileSync }) =>
    appendFileSync(file, `${new Date().toISOString()} ${message}\n`),
  );
}
