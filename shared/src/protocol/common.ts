import { type TSchema, Type } from '@sinclair/typebox';

/** A value the sender could not determine is null, never a guess. */
export const Nullable = <T extends TSchema>(schema: T) => Type.Union([schema, Type.Null()]);

/** Milliseconds since the Unix epoch. */
export const EpochMs = Type.Integer({ minimum: 0 });

/** Workload ids become Docker container names (`anvil-<id>`), so they keep Docker's name alphabet. */
export const WorkloadId = Type.String({ pattern: '^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$' });
