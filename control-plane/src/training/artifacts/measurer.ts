import type { Database } from '../../db/index.ts';
import { PassLoop } from '../../util/pass-loop.ts';
import type { ArtifactService } from './service.ts';

/** Artifacts measured per pass. */
const BATCH = 50;

/**
 * Measures new artifacts in the background (size and digest, from their hosts), so the storage meter
 * bills their bytes even when nobody lists them. One pass every `intervalSeconds`; an artifact whose host
 * does not answer stays unmeasured and is tried at the next pass.
 */
export class ArtifactMeasurer {
  readonly #loop: PassLoop<number>;

  constructor(
    private readonly d: {
      db: Database;
      artifacts: Pick<ArtifactService, 'measure'>;
      intervalSeconds: number;
      onError: (error: unknown) => void;
    },
  ) {
    this.#loop = new PassLoop({
      run: () => this.pass(),
      after: (measured) => (measured === BATCH ? 1_000 : d.intervalSeconds * 1000),
      failedMs: 60_000,
      onError: d.onError,
    });
  }

  start(): void {
    if (this.d.intervalSeconds > 0) this.#loop.start();
  }

  stop(): Promise<void> {
    return this.#loop.stop();
  }

  /** Measures up to BATCH unmeasured artifacts; returns how many it tried. */
  async pass(): Promise<number> {
    const rows = await this.d.db.prisma.trainingArtifact.findMany({
      where: { measuredAt: null, deletedAt: null, hostId: { not: null } },
      orderBy: { createdAt: 'asc' },
      take: BATCH,
    });
    for (const row of rows) await this.d.artifacts.measure(row).catch(() => null);
    return rows.length;
  }
}
