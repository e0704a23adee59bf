/**
 * The board catalogue: which GPU boards customers can ask for, and how NVML's product names
 * (nvmlDeviceGetName, `nvidia-smi --query-gpu=name`) map to them. Both sides use it: the agent to name
 * what it found, the control plane to index capacity (the same patterns run in SQL, so a GPU has one type
 * whichever side asks).
 *
 * Schedulable types are the API's `gpu_type` values. The spec's enum (A100, H100, RTX4090, V100, T4) keeps
 * its names for the boards they have always meant in this fleet: `H100` is the SXM board ("NVIDIA H100
 * 80GB HBM3") and `A100` the 80 GB board ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe"). The other
 * variants get names of their own (`H100_PCIE`, `A100_40GB`), and boards the spec does not list are added
 * (`H200`, `L40S`, `A10`). A board matching no pattern is not offered to customers.
 */
export const GPU_TYPES = [
  'A100',
  'H100',
  'RTX4090',
  'V100',
  'T4',
  'H200',
  'H100_PCIE',
  'A100_40GB',
  'L40S',
  'A10',
] as const;
export type GpuType = (typeof GPU_TYPES)[number];

export interface GpuBoard {
  type: GpuType;
  /** The board as operators call it ("H100 SXM", "A100 40GB"). */
  board: string;
  /**
   * Case-insensitive regular expression over the NVML product name, in the dialect JavaScript and
   * PostgreSQL's `~*` share (no lookaround, no `\b`).
   */
  pattern: string;
}

/** First match wins: the narrower variants come before their family's catch-all. */
export const GPU_BOARDS: readonly GpuBoard[] = [
  { type: 'H200', board: 'H200', pattern: 'H200' },
  // "NVIDIA H100 PCIe"; the H100 NVL is a PCIe card too (two bridged by NVLink).
  { type: 'H100_PCIE', board: 'H100 PCIe', pattern: 'H100.*(PCIE|NVL)' },
  // "NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM5 80GB", and a bare "NVIDIA H100".
  { type: 'H100', board: 'H100 SXM', pattern: 'H100' },
  // "NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB".
  { type: 'A100_40GB', board: 'A100 40GB', pattern: 'A100.*40GB' },
  // "NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe".
  { type: 'A100', board: 'A100 80GB', pattern: 'A100' },
  { type: 'L40S', board: 'L40S', pattern: 'L40S' },
  // "NVIDIA A10" and AWS's "NVIDIA A10G"; not A100, A16, A30, A40.
  { type: 'A10', board: 'A10', pattern: '(^|[^A-Z0-9])A10G?([^0-9A-Z]|$)' },
  { type: 'RTX4090', board: 'RTX 4090', pattern: '4090' },
  { type: 'V100', board: 'V100', pattern: 'V100' },
  { type: 'T4', board: 'T4', pattern: '(^|[^A-Z0-9])T4([^0-9]|$)' },
];

const COMPILED = GPU_BOARDS.map((b) => ({ board: b, re: new RegExp(b.pattern, 'i') }));

/** The board of an NVML product name, or null for one no customer can ask for. */
export function gpuBoardOf(name: string): GpuBoard | null {
  for (const { board, re } of COMPILED) if (re.test(name)) return board;
  return null;
}

/** The same mapping as a SQL expression (PostgreSQL) giving the type of the text expression `nameExpr`. */
export function gpuTypeSql(nameExpr: string): string {
  const arms = GPU_BOARDS.map(({ type, pattern }) => `WHEN ${nameExpr} ~* '${pattern}' THEN '${type}'`);
  return `(CASE ${arms.join(' ')} END)`;
}
