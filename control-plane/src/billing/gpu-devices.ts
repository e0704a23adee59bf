/** The UUIDs of a host's GPUs at the given inventory indices (those the inventory does not list are left out). */
export function gpuUuidsAt(inventory: unknown, indices: readonly number[]): string[] {
  const devices =
    (inventory as { gpus?: { devices?: { index: number; uuid: string }[] } } | null)?.gpus?.devices ?? [];
  return indices
    .map((index) => devices.find((d) => d.index === index)?.uuid)
    .filter((u): u is string => typeof u === 'string');
}
