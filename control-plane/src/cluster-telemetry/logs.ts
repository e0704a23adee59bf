import { ApiError } from '@anvil/shared';
import type { Database } from '../db/index.ts';
import type { TelemetryRetention } from '../fleet/telemetry/telemetry.ts';
import { LEVEL_SQL, LOG_SOURCE, LOG_TYPE } from './levels.ts';
import {
  compileLogQuery,
  containsPattern,
  LOG_LEVELS,
  LOG_SOURCES,
  LOG_TYPES,
  type LogColumns,
  type LogLevel,
  LogQuerySyntaxError,
  logTypeCondition,
  parseLogQuery,
  queryFields,
  SqlParams,
  searchTerms,
  sourceCondition,
} from './log-query.ts';
import { listParam, ParamErrors } from './params.ts';

/**
 * Whose lines are read: the workload whose id this is (a cluster's container has the cluster's id; a
 * training worker or an endpoint worker has its own workload id).
 */
export interface LogSubject {
  id: string;
}

export const MAX_LOG_LIMIT = 1_000;
export const DEFAULT_LOG_LIMIT = 100;

/** The spec's log entry, from one stored line (levels.ts states the rule). */
export interface ClusterLogEntry {
  id: string;
  timestamp: string;
  level: LogLevel;
  source: typeof LOG_SOURCE;
  log_type: typeof LOG_TYPE;
  message: string;
  process: null;
  metadata: {
    host: string;
    container_id: string;
    stream: 'stdout' | 'stderr';
    docker_timestamp: string;
    thread_id: null;
    file: null;
    line: null;
    gpu_id: null;
    cuda_version: null;
    driver_version: null;
  };
  tags: string[];
  stack_trace: null;
}

interface Row {
  seq: string | number;
  host_id: string;
  container_id: string;
  stream: 'stdout' | 'stderr';
  ts: string;
  at: Date | string;
  line: string;
  level: LogLevel;
}

const COLUMNS: LogColumns = {
  level: LEVEL_SQL,
  stream: 'stream',
  message: 'line',
  containerId: 'container_id',
};
const SELECT = `SELECT seq, host_id, container_id, stream, ts, at, line, ${LEVEL_SQL} AS level FROM log_entries`;

/** What narrows a log read; every value is bound as a parameter. */
export interface LogFilter {
  start?: Date | undefined;
  end?: Date | undefined;
  levels?: LogLevel[] | undefined;
  logType?: string | undefined;
  source?: string | undefined;
  search?: string | undefined;
  query?: ReturnType<typeof parseLogQuery> | undefined;
  afterSeq?: number | undefined;
  maxSeq?: number | undefined;
}

export interface ListQuery {
  log_type?: string | undefined;
  level?: string | string[] | undefined;
  start_time?: string | undefined;
  end_time?: string | undefined;
  limit?: number | undefined;
  offset?: number | undefined;
  search?: string | undefined;
  source?: string | undefined;
  format?: 'json' | 'text' | undefined;
  tail?: boolean | undefined;
}

export interface SearchBody {
  query: string;
  time_range?: { start?: string | undefined; end?: string | undefined } | undefined;
  limit?: number | undefined;
  offset?: number | undefined;
  sort?: string | undefined;
}

export function toEntry(row: Row): ClusterLogEntry {
  return {
    id: String(row.seq),
    timestamp: new Date(row.at).toISOString(),
    level: row.level,
    source: LOG_SOURCE,
    log_type: LOG_TYPE,
    message: row.line,
    process: null,
    metadata: {
      host: row.host_id,
      container_id: row.container_id,
      stream: row.stream,
      docker_timestamp: row.ts,
      thread_id: null,
      file: null,
      line: null,
      gpu_id: null,
      cuda_version: null,
      driver_version: null,
    },
    tags: [row.stream],
    stack_trace: null,
  };
}

/** One entry as a text line: `<timestamp> <LEVEL> [<stream>] <message>`. */
export function entryText(entry: ClusterLogEntry): string {
  return `${entry.timestamp} ${entry.level.toUpperCase().padEnd(5)} [${entry.metadata.stream}] ${entry.message}`;
}

/**
 * A cluster's logs: the lines its container wrote (the workload whose id is the cluster id), as stored
 * by the telemetry service, with filters, the boolean search language, pages for streaming and export.
 */
export class ClusterLogService {
  constructor(
    private readonly deps: {
      db: Database;
      retention: TelemetryRetention;
    },
  ) {}

  get retentionDays(): number {
    return Math.round((this.deps.retention.logsMs / 86_400_000) * 100) / 100;
  }

  #where(clusterId: string, filter: LogFilter, params: SqlParams): string {
    const conds = [`workload_id = ${params.add(clusterId)}`];
    if (filter.start) conds.push(`at >= ${params.add(filter.start.toISOString())}`);
    if (filter.end) conds.push(`at <= ${params.add(filter.end.toISOString())}`);
    if (filter.afterSeq !== undefined) conds.push(`seq > ${params.add(filter.afterSeq)}`);
    if (filter.maxSeq !== undefined) conds.push(`seq <= ${params.add(filter.maxSeq)}`);
    if (filter.levels && filter.levels.length > 0) {
      conds.push(`${LEVEL_SQL} IN (${filter.levels.map((l) => params.add(l)).join(', ')})`);
    }
    if (filter.logType) conds.push(logTypeCondition(filter.logType, COLUMNS, params));
    if (filter.source) conds.push(sourceCondition(filter.source));
    if (filter.search) conds.push(`line ILIKE ${params.add(containsPattern(filter.search))}`);
    if (filter.query) conds.push(compileLogQuery(filter.query, COLUMNS, params));
    return conds.join(' AND ');
  }

  async #read(
    clusterId: string,
    filter: LogFilter,
    page: { order: 'seq_asc' | 'seq_desc' | 'time_asc' | 'time_desc'; limit: number; offset?: number },
  ): Promise<ClusterLogEntry[]> {
    const params = new SqlParams();
    const where = this.#where(clusterId, filter, params);
    const order = {
      seq_asc: 'seq ASC',
      seq_desc: 'seq DESC',
      time_asc: 'at ASC, seq ASC',
      time_desc: 'at DESC, seq DESC',
    }[page.order];
    const rows = await this.deps.db.sql.query<Row>(
      `${SELECT} WHERE ${where} ORDER BY ${order} LIMIT ${params.add(page.limit)} OFFSET ${params.add(page.offset ?? 0)}`,
      params.values,
    );
    return rows.map(toEntry);
  }

  async #count(clusterId: string, filter: LogFilter): Promise<number> {
    const params = new SqlParams();
    const rows = await this.deps.db.sql.query<{ n: number | string }>(
      `SELECT count(*)::int AS n FROM log_entries WHERE ${this.#where(clusterId, filter, params)}`,
      params.values,
    );
    return Number(rows[0]?.n ?? 0);
  }

  /** GET /logs. With tail (the default) the page counts back from the newest line; lines come oldest first. */
  async list(cluster: LogSubject, query: ListQuery) {
    const errors = new ParamErrors();
    const start = errors.time('start_time', query.start_time);
    const end = errors.time('end_time', query.end_time);
    errors.order(start, end);
    const levels = listParam(query.level);
    for (const level of levels) {
      if (!(LOG_LEVELS as readonly string[]).includes(level))
        errors.add('level', `must be one of ${LOG_LEVELS.join(', ')}`);
    }
    if (query.log_type !== undefined && !(LOG_TYPES as readonly string[]).includes(query.log_type)) {
      errors.add('log_type', `must be one of ${LOG_TYPES.join(', ')}`);
    }
    if (query.source !== undefined && !(LOG_SOURCES as readonly string[]).includes(query.source)) {
      errors.add('source', `must be one of ${LOG_SOURCES.join(', ')}`);
    }
    const limit = query.limit ?? DEFAULT_LOG_LIMIT;
    if (limit < 1 || limit > MAX_LOG_LIMIT) errors.add('limit', `must be between 1 and ${MAX_LOG_LIMIT}`);
    const offset = query.offset ?? 0;
    if (offset < 0) errors.add('offset', 'must be 0 or more');
    errors.throwIfAny();
    const filter: LogFilter = {
      start,
      end,
      levels: levels as LogLevel[],
      logType: query.log_type,
      source: query.source,
      search: query.search || undefined,
    };
    const tail = query.tail !== false;
    const [entries, total] = await Promise.all([
      this.#read(cluster.id, filter, { order: tail ? 'seq_desc' : 'seq_asc', limit, offset }),
      this.#count(cluster.id, filter),
    ]);
    if (tail) entries.reverse();
    const applied = Object.entries({
      log_type: query.log_type,
      level: levels.length ? levels : undefined,
      start_time: query.start_time,
      end_time: query.end_time,
      search: filter.search,
      source: query.source,
    })
      .filter(([, v]) => v !== undefined)
      .map(([k]) => k);
    return {
      entries,
      body: {
        cluster_id: cluster.id,
        logs: entries,
        pagination: pagination(total, limit, offset),
        query_info: {
          log_type: query.log_type ?? null,
          time_range: { start: start?.toISOString() ?? null, end: end?.toISOString() ?? null },
          filters_applied: applied,
          search_terms: filter.search ? [filter.search] : [],
        },
      },
    };
  }

  /** POST /logs/search: the boolean query language, a time range, sort by timestamp. */
  async search(cluster: LogSubject, body: SearchBody) {
    const errors = new ParamErrors();
    let parsed: ReturnType<typeof parseLogQuery> | undefined;
    try {
      parsed = parseLogQuery(body.query);
    } catch (error) {
      if (!(error instanceof LogQuerySyntaxError)) throw error;
      throw new ApiError('INVALID_PARAMETERS', `query syntax error: ${error.message}`, {
        query: error.reason,
        position: error.position,
        near: body.query.slice(error.position, error.position + 20),
      });
    }
    const start = errors.time('time_range.start', body.time_range?.start);
    const end = errors.time('time_range.end', body.time_range?.end);
    errors.order(start, end, 'time_range.end');
    const sort = parseSort(body.sort, errors);
    const limit = body.limit ?? DEFAULT_LOG_LIMIT;
    const offset = body.offset ?? 0;
    errors.throwIfAny();
    const filter: LogFilter = { start, end, query: parsed };
    const [entries, total] = await Promise.all([
      this.#read(cluster.id, filter, { order: sort === 'asc' ? 'time_asc' : 'time_desc', limit, offset }),
      this.#count(cluster.id, filter),
    ]);
    return {
      cluster_id: cluster.id,
      logs: entries,
      total_matches: total,
      pagination: pagination(total, limit, offset),
      query_info: {
        log_type: null,
        time_range: { start: start?.toISOString() ?? null, end: end?.toISOString() ?? null },
        filters_applied: parsed ? queryFields(parsed) : [],
        search_terms: parsed ? searchTerms(parsed) : [],
        query: body.query,
        sort: `timestamp:${sort}`,
      },
    };
  }

  /** Lines after `afterSeq` (oldest first), for the stream. */
  after(
    cluster: LogSubject,
    afterSeq: number,
    limit: number,
    filter: LogFilter = {},
  ): Promise<ClusterLogEntry[]> {
    return this.#read(cluster.id, { ...filter, afterSeq }, { order: 'seq_asc', limit });
  }

  /** The newest `count` lines, oldest first, for the start of a stream without Last-Event-ID. */
  async last(cluster: LogSubject, count: number, filter: LogFilter = {}): Promise<ClusterLogEntry[]> {
    if (count <= 0) return [];
    const entries = await this.#read(cluster.id, filter, { order: 'seq_desc', limit: count });
    return entries.reverse();
  }

  /** The highest sequence number of the cluster's lines (0 when none): where a follow-only stream starts. */
  async newestSeq(cluster: LogSubject): Promise<number> {
    const rows = await this.deps.db.sql.query<{ seq: string | number | null }>(
      'SELECT max(seq) AS seq FROM log_entries WHERE workload_id = $1',
      [cluster.id],
    );
    return Number(rows[0]?.seq ?? 0);
  }

  /** Every line of a time range, oldest first, in pages of `pageSize` (keyset on seq): for downloads. */
  async *export(cluster: LogSubject, filter: LogFilter, pageSize = 1_000): AsyncGenerator<ClusterLogEntry[]> {
    let after = 0;
    for (;;) {
      const page = await this.after(cluster, after, pageSize, filter);
      if (page.length === 0) return;
      yield page;
      after = Number(page.at(-1)!.id);
      if (page.length < pageSize) return;
    }
  }
}

function parseSort(sort: string | undefined, errors: ParamErrors): 'asc' | 'desc' {
  if (sort === undefined || sort === '') return 'desc';
  const m = /^(?:timestamp)?[\s:_-]*(asc|desc)$/i.exec(sort.trim()) ?? /^(timestamp)$/i.exec(sort.trim());
  if (!m) {
    errors.add(
      'sort',
      'must be timestamp:asc or timestamp:desc ("timestamp desc", "asc" and "desc" also work)',
    );
    return 'desc';
  }
  return m[1]!.toLowerCase() === 'asc' ? 'asc' : 'desc';
}

export function pagination(total: number, limit: number, offset: number) {
  return {
    total_count: total,
    current_page: Math.floor(offset / limit) + 1,
    total_pages: Math.ceil(total / limit),
    has_next: offset + limit < total,
    has_previous: offset > 0,
  };
}
