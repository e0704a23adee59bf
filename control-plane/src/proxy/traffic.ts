import { createHash } from 'node:crypto';
import type { Clock } from '../auth/clock.ts';
import type { Database } from '../db/index.ts';

export interface AccessLogEntry {
  timestamp: string;
  client_ip: string;
  /** The user id behind the key or session; null for public (unauthenticated) traffic. */
  user: string | null;
  method: string;
  path: string;
  status_code: number;
  response_time_ms: number;
  user_agent: string | null;
}

interface Pending {
  requests: number;
  responseMs: number;
  lastAccessed: Date;
  visitors: Set<string>;
}

/** Entries kept per cluster (newest last). */
export const ACCESS_LOG_CAPACITY = 500;

/**
 * Real traffic through the proxy. Access logs are a ring buffer in this process (the last
 * ACCESS_LOG_CAPACITY requests per cluster, forwarded and refused alike; lost at restart). Usage
 * counters of forwarded requests and the visitors seen are persisted per mapping by a periodic flush.
 */
export class TrafficRecorder {
  private readonly logs = new Map<string, AccessLogEntry[]>();
  private readonly pending = new Map<string, Pending>();
  private readonly knownVisitors = new Set<string>();
  private flushing: Promise<void> | null = null;

  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
  ) {}

  log(clusterId: string, entry: AccessLogEntry): void {
    let list = this.logs.get(clusterId);
    if (!list) {
      list = [];
      this.logs.set(clusterId, list);
    }
    list.push(entry);
    if (list.length > ACCESS_LOG_CAPACITY) list.splice(0, list.length - ACCESS_LOG_CAPACITY);
  }

  accessLogs(clusterId: string, limit = 100): AccessLogEntry[] {
    return (this.logs.get(clusterId) ?? []).slice(-limit).reverse();
  }

  /** A request forwarded to the container through mapping `portId` and answered. */
  forwarded(portId: string, visitor: string, responseMs: number): void {
    let pending = this.pending.get(portId);
    if (!pending) {
      pending = { requests: 0, responseMs: 0, lastAccessed: this.clock.now(), visitors: new Set() };
      this.pending.set(portId, pending);
    }
    pending.requests++;
    pending.responseMs += responseMs;
    pending.lastAccessed = this.clock.now();
    const hashed = createHash('sha256').update(visitor).digest('hex');
    if (!this.knownVisitors.has(`${portId}:${hashed}`)) pending.visitors.add(hashed);
  }

  /** Writes pending counters and visitors (on a timer, before API reads, at shutdown). */
  flush(): Promise<void> {
    this.flushing ??= this.write().finally(() => {
      this.flushing = null;
    });
    return this.flushing;
  }

  private async write(): Promise<void> {
    if (this.pending.size === 0) return;
    const batch = [...this.pending];
    this.pending.clear();
    for (const [portId, pending] of batch) {
      try {
        await this.db.sql.query(
          `UPDATE proxy_port_mappings SET total_requests = total_requests + $2,
             total_response_ms = total_response_ms + $3,
             last_accessed = GREATEST(COALESCE(last_accessed, $4::timestamptz), $4::timestamptz)
           WHERE id = $1`,
          [portId, pending.requests, pending.responseMs, pending.lastAccessed.toISOString()],
        );
        if (pending.visitors.size > 0) {
          const visitors = [...pending.visitors];
          await this.db.sql.query(
            `INSERT INTO proxy_visitors (port_id, visitor)
             SELECT $1, v FROM unnest($2::text[]) AS v
             WHERE EXISTS (SELECT 1 FROM proxy_port_mappings WHERE id = $1)
             ON CONFLICT DO NOTHING`,
            [portId, visitors],
          );
          if (this.knownVisitors.size > 100_000) this.knownVisitors.clear();
          for (const v of visitors) this.knownVisitors.add(`${portId}:${v}`);
        }
      } catch {
        // A mapping deleted meanwhile, or the database briefly away: these counts are dropped.
      }
    }
  }
}
