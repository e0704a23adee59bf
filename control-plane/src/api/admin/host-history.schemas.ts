import { type TSchema, Type } from '@sinclair/typebox';
import { HOST_EVENT_TYPES } from '../../fleet/hosts/event-log.ts';

const Nullable = <T extends TSchema>(schema: T) => Type.Union([schema, Type.Null()]);
const DateTime = Type.String({ format: 'date-time' });

/** Thirty days: as far back as the one-minute rollups reach. */
export const MAX_SERIES_SPAN_MS = 30 * 86_400_000;

export const SeriesQuery = Type.Object(
  {
    kind: Type.Optional(
      Type.Union([Type.Literal('host'), Type.Literal('gpu'), Type.Literal('container')], {
        description:
          'host (default): CPU, load, memory, disks, disk IO, network; gpu: one series per GPU UUID',
      }),
    ),
    series: Type.Optional(Type.String({ maxLength: 128, description: 'One GPU UUID or workload id' })),
    keys: Type.Optional(
      Type.String({
        maxLength: 2_000,
        description:
          'Comma list of value names (e.g. utilizationPercent,temperatureC); every value when absent. At most 64.',
      }),
    ),
    from: Type.Optional(Type.String({ format: 'date-time', description: 'Default: an hour before `to`' })),
    to: Type.Optional(Type.String({ format: 'date-time', description: 'Default: now' })),
    points: Type.Optional(
      Type.Integer({
        minimum: 2,
        maximum: 2_000,
        description:
          'Most buckets answered (default 360). A bucket spans at least two metric intervals (raw) or a minute (rollups).',
      }),
    ),
  },
  { additionalProperties: false },
);

export const SeriesResponse = Type.Object({
  hostId: Type.String(),
  kind: Type.String(),
  from: DateTime,
  to: DateTime,
  source: Type.Union([Type.Literal('raw'), Type.Literal('1m')], {
    description: 'raw samples when `from` is within their 24 h retention, else the one-minute rollups',
  }),
  stepSeconds: Type.Integer({ description: 'Width of every bucket' }),
  times: Type.Array(Type.Number(), { description: 'Start of each bucket, epoch milliseconds, oldest first' }),
  series: Type.Array(
    Type.Object({
      series: Type.String({ description: "GPU UUID, workload id, or '' for the host" }),
      values: Type.Record(Type.String(), Type.Array(Nullable(Type.Number())), {
        description: "Gauges: each bucket's average; null where the bucket has no sample",
      }),
      rates: Type.Record(Type.String(), Type.Array(Nullable(Type.Number())), {
        description:
          'Counters (network and disk IO bytes, errors, operations, CPU time): increase per second; null where unknown or the counter restarted',
      }),
    }),
  ),
});

export const HostEventsQuery = Type.Object(
  {
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 500, description: 'Default 100' })),
    before: Type.Optional(
      Type.String({
        pattern: '^[0-9]{1,19}$',
        description: 'An event id: only older events (the next page)',
      }),
    ),
    type: Type.Optional(
      Type.String({ maxLength: 200, description: `Comma list of types: ${HOST_EVENT_TYPES.join(', ')}` }),
    ),
  },
  { additionalProperties: false },
);

export const HostEventRecord = Type.Object({
  id: Type.String({ description: 'Increases with every event' }),
  at: DateTime,
  type: Type.Union(HOST_EVENT_TYPES.map((t) => Type.Literal(t))),
  message: Type.String(),
  detail: Nullable(Type.Record(Type.String(), Type.Unknown())),
});

export const HostEventsResponse = Type.Object({
  hostId: Type.String(),
  events: Type.Array(HostEventRecord, { description: 'Newest first' }),
  nextBefore: Nullable(Type.String({ description: 'Pass as `before` for older events; null at the end' })),
});
