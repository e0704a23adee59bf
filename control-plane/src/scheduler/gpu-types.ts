/** The GPU types customers ask for (spec: Cluster.gpu_type). */
export const GPU_TYPES = ['A100', 'H100', 'RTX4090', 'V100', 'T4'] as const;
export type GpuType = (typeof GPU_TYPES)[number];

/** The regions hosts are labelled with at join time (spec: Cluster.region). */
export const REGIONS = ['us-east-1', 'us-west-2', 'eu-west-1', 'ap-southeast-1'] as const;

/**
 * How an inventory GPU name ("NVIDIA H100 80GB HBM3", "Tesla V100-SXM2-16GB", "NVIDIA GeForce RTX 4090")
 * maps to a type. Order matters only for names that could match two patterns (none today). The same
 * patterns are used in SQL by the capacity index (capacity.ts), so both sides agree.
 */
export const GPU_NAME_PATTERNS: readonly { type: GpuType; pattern: string }[] = [
  { type: 'H100', pattern: 'H100' },
  { type: 'A100', pattern: 'A100' },
  { type: 'RTX4090', pattern: '4090' },
  { type: 'V100', pattern: 'V100' },
  { type: 'T4', pattern: '(^|[^A-Z0-9])T4([^0-9]|$)' },
];

/** The type of an inventory GPU name, or null for a GPU no customer can ask for. */
export function gpuTypeOf(name: string): GpuType | null {
  for (const { type, pattern } of GPU_NAME_PATTERNS) {
    if (new RegExp(pattern, 'i').test(name)) return type;
  }
  return null;
}

/** The same mapping as a SQL expression over `nameExpr` (a text expression). */
export function gpuTypeSql(nameExpr: string): string {
  const arms = GPU_NAME_PATTERNS.map(
    ({ type, pattern }) => `WHEN ${nameExpr} ~* '${pattern}' THEN '${type}'`,
  );
  return `(CASE ${arms.join(' ')} END)`;
}
