import { Counter, collectDefaultMetrics, Gauge, Registry } from 'prom-client';
import type { Clock } from '../../auth/clock.ts';
import type { Database } from '../../db/index.ts';
import { type DcgmDevice, DcgmGauges } from './dcgm-gauges.ts';

/** Samples older than this do not feed the per-GPU gauges: a silent GPU shows no value, not a stale one. */
const GPU_GAUGE_MAX_AGE_MS = 5 * 60_000;

/** Where the fleet gauges are read from at each scrape. */
export interface PrometheusSources {
  db: Database;
  clock: Clock;
}

/**
 * The operators' Prometheus exposition (/metrics). Counters are this process's own; gauges about the
 * fleet are read from the database at scrape time, so every replica reports the same fleet.
 */
export class ControlPlaneMetrics {
  readonly registry = new Registry();
  readonly httpRequests: Counter<'method' | 'route' | 'status'>;
  readonly agentMessages: Counter<'type'>;
  readonly agentConnections: Counter<'outcome'>;
  readonly agentRefusals: Counter<'code'>;
  readonly agentBadFrames: Counter<'code'>;
  readonly agentCommands: Counter<'command' | 'outcome'>;
  readonly metricSamplesIngested: Counter;
  readonly metricSamplesDroppedByAgents: Counter;
  readonly logLinesIngested: Counter;
  readonly logLinesDroppedByAgents: Counter;
  readonly telemetryRowsDropped: Counter<'table' | 'reason'>;
  readonly hostsUnreachable: Counter;
  /** Agent connections held by this process: set by the gateway as its connections change. */
  readonly agentsConnected: Gauge;
  readonly #hosts: Gauge<'state' | 'cordoned'>;
  readonly #hostsConnected: Gauge;
  readonly #heartbeatAge: Gauge<'host_id' | 'host'>;
  readonly #gpus: Gauge<'model' | 'simulated'>;
  readonly #gpuUtilisation: Gauge<'host_id' | 'gpu_uuid' | 'gpu_index'>;
  readonly #gpuMemoryUsed: Gauge<'host_id' | 'gpu_uuid' | 'gpu_index'>;
  readonly #gpuMemoryTotal: Gauge<'host_id' | 'gpu_uuid' | 'gpu_index'>;
  readonly #workloads: Gauge<'phase' | 'desired'>;
  readonly #dcgm: DcgmGauges;
  readonly #sources: PrometheusSources | null;

  /**
   * Without `sources`, the fleet gauges stay empty (tests of the counters). Other areas' gauges register
   * on `registry` with a collect function of their own, which prom-client runs at each scrape
   * (endpoints/prometheus.ts).
   */
  constructor(options: { processMetrics?: boolean; sources?: PrometheusSources } = {}) {
    this.#sources = options.sources ?? null;
    const registers = [this.registry];
    if (options.processMetrics) collectDefaultMetrics({ register: this.registry, prefix: 'anvil_process_' });
    this.httpRequests = new Counter({
      name: 'anvil_http_requests_total',
      help: 'HTTP requests answered, by method, route pattern and status',
      labelNames: ['method', 'route', 'status'],
      registers,
    });
    this.agentMessages = new Counter({
      name: 'anvil_agent_messages_total',
      help: 'Messages received from agents, by type',
      labelNames: ['type'],
      registers,
    });
    this.agentConnections = new Counter({
      name: 'anvil_agent_connections_total',
      help: 'Agent WebSocket connections by outcome (welcomed, registered, refused, replaced, closed)',
      labelNames: ['outcome'],
      registers,
    });
    this.agentRefusals = new Counter({
      name: 'anvil_agent_refusals_total',
      help: 'Refusals sent to agents, by refusal code',
      labelNames: ['code'],
      registers,
    });
    this.agentBadFrames = new Counter({
      name: 'anvil_agent_bad_frames_total',
      help: 'Frames from agents that could not be decoded, by reason',
      labelNames: ['code'],
      registers,
    });
    this.agentCommands = new Counter({
      name: 'anvil_agent_commands_total',
      help: 'Commands sent to agents, by command and outcome (ok, error, timeout, not_connected)',
      labelNames: ['command', 'outcome'],
      registers,
    });
    this.metricSamplesIngested = new Counter({
      name: 'anvil_metric_samples_ingested_total',
      help: 'Metric series points (host, GPU or container) accepted from agents',
      registers,
    });
    this.metricSamplesDroppedByAgents = new Counter({
      name: 'anvil_metric_samples_dropped_by_agents_total',
      help: 'Metric samples agents reported dropping while their buffer was full',
      registers,
    });
    this.logLinesIngested = new Counter({
      name: 'anvil_log_lines_ingested_total',
      help: 'Container log lines accepted from agents',
      registers,
    });
    this.logLinesDroppedByAgents = new Counter({
      name: 'anvil_log_lines_dropped_by_agents_total',
      help: 'Container log lines agents reported dropping (logs_dropped)',
      registers,
    });
    this.telemetryRowsDropped = new Counter({
      name: 'anvil_telemetry_rows_dropped_total',
      help: 'Telemetry rows this process could not store (buffer overflow or repeated write failure)',
      labelNames: ['table', 'reason'],
      registers,
    });
    this.hostsUnreachable = new Counter({
      name: 'anvil_host_unreachable_transitions_total',
      help: 'Times a host was marked unreachable by this process',
      registers,
    });
    this.#hosts = new Gauge({
      name: 'anvil_hosts',
      help: 'Hosts by state (registered, ready, unreachable) and cordoned flag',
      labelNames: ['state', 'cordoned'],
      registers,
    });
    this.#hostsConnected = new Gauge({
      name: 'anvil_hosts_connected',
      help: 'Ready hosts whose agent is connected to some control-plane process',
      registers,
    });
    this.agentsConnected = new Gauge({
      name: 'anvil_agents_connected',
      help: 'Agent connections held by this control-plane process',
      registers,
    });
    this.#heartbeatAge = new Gauge({
      name: 'anvil_host_heartbeat_age_seconds',
      help: 'Seconds since the last heartbeat of each host',
      labelNames: ['host_id', 'host'],
      registers,
    });
    this.#gpus = new Gauge({
      name: 'anvil_gpus',
      help: 'GPUs in the inventory of hosts that are not deleted, by model and simulated flag',
      labelNames: ['model', 'simulated'],
      registers,
    });
    const gpuLabels = ['host_id', 'gpu_uuid', 'gpu_index'] as const;
    this.#gpuUtilisation = new Gauge({
      name: 'anvil_gpu_utilization_percent',
      help: 'Latest GPU utilisation sample (within 5 minutes)',
      labelNames: gpuLabels,
      registers,
    });
    this.#gpuMemoryUsed = new Gauge({
      name: 'anvil_gpu_memory_used_bytes',
      help: 'Latest GPU memory used sample (within 5 minutes)',
      labelNames: gpuLabels,
      registers,
    });
    this.#gpuMemoryTotal = new Gauge({
      name: 'anvil_gpu_memory_total_bytes',
      help: 'Latest GPU memory total sample (within 5 minutes)',
      labelNames: gpuLabels,
      registers,
    });
    this.#dcgm = new DcgmGauges(this.registry);
    this.#workloads = new Gauge({
      name: 'anvil_workloads',
      help: 'Workloads (containers the fleet should run or ran) by phase and desired state',
      labelNames: ['phase', 'desired'],
      registers,
    });
  }

  /** Reads the fleet gauges from the database, then renders the text exposition. */
  async render(): Promise<{ contentType: string; body: string }> {
    if (this.#sources) await this.#refresh(this.#sources);
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }

  async #refresh({ db, clock }: PrometheusSources): Promise<void> {
    const now = clock.now();
    const [hosts, gpus, gpuSamples, workloads, devices, health] = await Promise.all([
      db.sql.query<{
        id: string;
        name: string;
        state: string;
        cordoned: boolean;
        connected: boolean;
        hb: Date | string | null;
      }>(
        `SELECT id, name, state, cordoned, connected_replica_id IS NOT NULL AS connected, last_heartbeat_at AS hb
         FROM hosts WHERE deleted_at IS NULL`,
      ),
      db.sql.query<{ model: string; simulated: boolean; n: string | number }>(
        `SELECT COALESCE(d->>'name', 'unknown') AS model, h.simulated, count(*) AS n
         FROM hosts h CROSS JOIN LATERAL jsonb_array_elements(COALESCE(h.inventory->'gpus'->'devices', '[]'::jsonb)) AS d
         WHERE h.deleted_at IS NULL GROUP BY 1, 2`,
      ),
      db.sql.query<{ host_id: string; series: string; data: Record<string, unknown> | string }>(
        `SELECT DISTINCT ON (host_id, series) host_id, series, data FROM metric_samples
         WHERE kind = 'gpu' AND received_at > $1 ORDER BY host_id, series, at DESC`,
        [new Date(now.getTime() - GPU_GAUGE_MAX_AGE_MS).toISOString()],
      ),
      db.sql.query<{ phase: string; desired: string; n: string | number }>(
        'SELECT phase, desired, count(*) AS n FROM workloads GROUP BY 1, 2',
      ),
      db.sql.query<DcgmDevice>(
        `SELECT h.id AS "hostId", h.hostname, (d->>'index')::int AS index, d->>'uuid' AS uuid, d->>'name' AS name
         FROM hosts h CROSS JOIN LATERAL jsonb_array_elements(
           CASE WHEN jsonb_typeof(h.inventory->'gpus'->'devices') = 'array' THEN h.inventory->'gpus'->'devices'
                ELSE '[]'::jsonb END) AS d
         WHERE h.deleted_at IS NULL`,
      ),
      db.sql.query<{ host_id: string; gpu_index: number; state: string }>(
        `SELECT g.host_id, g.gpu_index, g.state FROM host_gpu_health g JOIN hosts h ON h.id = g.host_id
         WHERE h.deleted_at IS NULL`,
      ),
    ]);

    this.#hosts.reset();
    for (const state of ['registered', 'ready', 'unreachable']) {
      for (const cordoned of ['true', 'false']) this.#hosts.set({ state, cordoned }, 0);
    }
    this.#heartbeatAge.reset();
    let connected = 0;
    for (const host of hosts) {
      this.#hosts.inc({ state: host.state, cordoned: String(host.cordoned) });
      if (host.state === 'ready' && host.connected) connected += 1;
      if (host.hb) {
        const age = (now.getTime() - new Date(host.hb).getTime()) / 1000;
        this.#heartbeatAge.set({ host_id: host.id, host: host.name }, Math.max(0, age));
      }
    }
    this.#hostsConnected.set(connected);

    this.#gpus.reset();
    for (const row of gpus)
      this.#gpus.set({ model: row.model, simulated: String(row.simulated) }, Number(row.n));

    this.#gpuUtilisation.reset();
    this.#gpuMemoryUsed.reset();
    this.#gpuMemoryTotal.reset();
    for (const row of gpuSamples) {
      const data = (typeof row.data === 'string' ? JSON.parse(row.data) : row.data) as Record<
        string,
        unknown
      >;
      const labels = { host_id: row.host_id, gpu_uuid: row.series, gpu_index: String(data['index'] ?? '') };
      const set = (gauge: Gauge<'host_id' | 'gpu_uuid' | 'gpu_index'>, value: unknown) => {
        if (typeof value === 'number') gauge.set(labels, value);
      };
      set(this.#gpuUtilisation, data['utilizationPercent']);
      set(this.#gpuMemoryUsed, data['memoryUsedBytes']);
      set(this.#gpuMemoryTotal, data['memoryTotalBytes']);
    }

    this.#dcgm.set(
      devices,
      new Map(
        gpuSamples.map((row) => [
          row.series,
          (typeof row.data === 'string' ? JSON.parse(row.data) : row.data) as Record<string, unknown>,
        ]),
      ),
      new Map(health.map((row) => [`${row.host_id}#${row.gpu_index}`, row.state])),
    );

    this.#workloads.reset();
    for (const row of workloads)
      this.#workloads.set({ phase: row.phase, desired: row.desired }, Number(row.n));
  }
}
