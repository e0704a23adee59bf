/**
 * Protocol versioning. Every frame carries `v`, the protocol version its sender speaks.
 * A peer accepts frames whose `v` lies in its supported range and refuses the rest with a
 * `refusal` naming both sides' versions, so an operator sees at once which side to upgrade.
 * Bump PROTOCOL_VERSION only for incompatible changes; adding an optional field is not one
 * (schemas accept unknown properties so older peers ignore what they do not know).
 */
export const PROTOCOL_VERSION = 1;

/** The range this build accepts. Widen `min` downwards only while old peers are still fully served. */
export const SUPPORTED_PROTOCOL_VERSIONS = { min: 1, max: PROTOCOL_VERSION } as const;

export function isProtocolCompatible(v: number): boolean {
  return Number.isInteger(v) && v >= SUPPORTED_PROTOCOL_VERSIONS.min && v <= SUPPORTED_PROTOCOL_VERSIONS.max;
}

/**
 * The sentence both sides log and send when versions do not match, naming who should upgrade.
 * `peer` is the other side (the control plane passes 'agent', the agent passes 'control plane').
 */
export function protocolMismatchReason(peer: 'agent' | 'control plane', peerVersion: number): string {
  const local = peer === 'agent' ? 'control plane' : 'agent';
  const { min, max } = SUPPORTED_PROTOCOL_VERSIONS;
  const range = min === max ? `${min}` : `${min}..${max}`;
  const upgrade = peerVersion > max ? local : peer;
  return `incompatible protocol version: ${peer} speaks ${peerVersion}, ${local} supports ${range}; upgrade the ${upgrade}`;
}

/** The WebSocket path agents dial on the control plane. */
export const AGENT_CONNECT_PATH = '/agent/v1/connect';

/** The WebSocket path an agent dials for each reverse tunnel the control plane asks for (tunnel.ts). */
export const AGENT_TUNNEL_PATH = '/agent/v1/tunnel';

/**
 * Where an agent relays a connection a container opened to its worker API port (WorkloadSpec.workerApi):
 * a raw upgrade to TUNNEL_UPGRADE with the host credential and WORKER_API_HEADERS.workloadId; after 101
 * the socket carries the container's HTTP/1.1 as it is.
 */
export const AGENT_WORKER_API_PATH = '/agent/v1/worker-api';

/** The name containers reach the agent's worker API port by (an /etc/hosts entry the agent adds). */
export const WORKER_API_HOST = 'anvil-agent';

/** Headers of a worker API relay's upgrade (besides the host credential as `authorization: Bearer`). */
export const WORKER_API_HEADERS = {
  hostId: 'x-anvil-host-id',
  /** The workload whose container opened the connection, as the agent found it by source address. */
  workloadId: 'x-anvil-workload-id',
} as const;

/** Where agents fetch a workload's downloads (WorkloadDownload), over plain HTTP(S) with the host credential. */
export const AGENT_DOWNLOAD_PATH = '/agent/v1/downloads';

/** Where the control plane serves agent artifacts (public: they hold no secret), with manifest.json. */
export const AGENT_ARTIFACTS_PATH = '/agent/artifacts';

/** Largest frame either side accepts; log and metric batches are sized to stay well under it. */
export const MAX_FRAME_BYTES = 4 * 1024 * 1024;
