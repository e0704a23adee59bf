import { readFile } from 'node:fs/promises';
import { ApiError } from '@anvil/shared';
import type { Clock } from '../auth/clock.ts';
import type { Database } from '../db/index.ts';
import { GPU_TYPES, type GpuType } from '../scheduler/gpu-types.ts';

export interface GpuPriceView {
  gpu_type: GpuType;
  /** USD per GPU-hour. */
  hourly_rate: number;
  currency: 'USD';
  updated_at: string;
}

/**
 * The operator's price table: USD per GPU-hour by GPU type, in the gpu_prices table. Set through
 * `PUT /v2/admin/gpu-prices` or, at start-up, from the JSON file named by ANVIL_GPU_PRICES_FILE
 * ({"H100": 2.49, ...}; the file wins over earlier API changes at each start). A type without a price
 * is billed at 0. A cluster's rate is fixed when it is placed, so a price change applies to placements
 * after it.
 */
export class PriceTable {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
  ) {}

  async list(): Promise<GpuPriceView[]> {
    const rows = await this.db.prisma.gpuPrice.findMany({ orderBy: { gpuType: 'asc' } });
    return rows
      .filter((r) => (GPU_TYPES as readonly string[]).includes(r.gpuType))
      .map((r) => ({
        gpu_type: r.gpuType as GpuType,
        hourly_rate: r.hourlyRate,
        currency: 'USD' as const,
        updated_at: r.updatedAt.toISOString(),
      }));
  }

  /** Sets the given types' prices (others unchanged), in one transaction. */
  async set(prices: Partial<Record<GpuType, number>>): Promise<GpuPriceView[]> {
    const entries = Object.entries(prices) as [GpuType, number][];
    for (const [type, rate] of entries) {
      if (!GPU_TYPES.includes(type)) {
        throw new ApiError('VALIDATION_ERROR', `unknown GPU type ${type}`, {
          field: type,
          reason: `must be one of ${GPU_TYPES.join(', ')}`,
        });
      }
      if (!Number.isFinite(rate) || rate < 0) {
        throw new ApiError('VALIDATION_ERROR', `price of ${type} must be a number >= 0`, {
          field: type,
          reason: 'must be a number >= 0',
        });
      }
    }
    const now = this.clock.now();
    await this.db.prisma.$transaction(
      entries.map(([gpuType, hourlyRate]) =>
        this.db.prisma.gpuPrice.upsert({
          where: { gpuType },
          create: { gpuType, hourlyRate, currency: 'USD', updatedAt: now },
          update: { hourlyRate, updatedAt: now },
        }),
      ),
    );
    return this.list();
  }

  /** Applies ANVIL_GPU_PRICES_FILE. A malformed file stops start-up with a message naming it. */
  async loadFile(path: string): Promise<void> {
    let parsed: unknown;
    try {
      parsed = JSON.parse(await readFile(path, 'utf8'));
    } catch (error) {
      throw new Error(`ANVIL_GPU_PRICES_FILE ${path}: ${(error as Error).message}`);
    }
    if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) {
      throw new Error(`ANVIL_GPU_PRICES_FILE ${path}: expected an object like {"H100": 2.49}`);
    }
    await this.set(parsed as Partial<Record<GpuType, number>>);
  }
}
