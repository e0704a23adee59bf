import type { Static } from '@sinclair/typebox';
import type {
  AdminAccountList,
  AdminClusterList,
  HostDetailRecord,
  HostRecord,
  HostWorkload as HostWorkloadSchema,
  JoinTokenRecord,
  LogsResponse,
  MetricsResponse,
  WorkloadRecord,
} from '../../api/admin/admin.schemas.ts';
import type { HostEventRecord, SeriesResponse } from '../../api/admin/host-history.schemas.ts';

/**
 * The admin API's shapes, derived from the schemas its routes validate and serialise with: a change
 * there that the dashboard does not follow fails `npm run typecheck`. Type-only imports: nothing of the
 * server reaches the browser bundle.
 */
export type Host = Static<typeof HostRecord>;
export type HostDetail = Static<typeof HostDetailRecord>;
export type HostWorkload = Static<typeof HostWorkloadSchema>;
export type GpuDevice = NonNullable<HostDetail['inventory']>['gpus']['devices'][number];
export type MetricPoint = Static<typeof MetricsResponse>['points'][number];
export type JoinToken = Static<typeof JoinTokenRecord>;
export type LogLine = Static<typeof LogsResponse>['lines'][number];
export type Workload = Static<typeof WorkloadRecord>;
export type ClusterList = Static<typeof AdminClusterList>;
export type AdminCluster = ClusterList['clusters'][number];
export type AccountList = Static<typeof AdminAccountList>;
export type AdminAccount = AccountList['accounts'][number];
export type MetricSeries = Static<typeof SeriesResponse>;
export type HostEvent = Static<typeof HostEventRecord>;
