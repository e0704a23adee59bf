import type { GpuHealthReason, GpuHealthState } from '@anvil/shared/protocol';
import type { AuditActor } from '../../accounts/audit.ts';

/**
 * What the fleet's domain modules tell the agent gateway, without importing it: a workload change means
 * the host's desired set must be pushed; a deleted host's connection must be closed. Listeners run
 * concurrently and their failures are theirs to log: the change itself is already committed, and an
 * agent that misses a push gets the whole desired set again when it reconnects.
 */
export type FleetListener = (hostId: string) => Promise<void>;
/** An agent was welcomed (and may now be sent commands), reporting `agentVersion`. */
export type GreetedListener = (hostId: string, agentVersion: string | null) => Promise<void>;
/** One change of a GPU's kept health: the agent reported a worse state, or an operator reset it. */
export interface GpuHealthChange {
  hostId: string;
  gpuIndex: number;
  gpuUuid: string;
  /** null: the first health this GPU reported. */
  from: GpuHealthState | null;
  to: GpuHealthState;
  reasons: GpuHealthReason[];
  at: Date;
  /** null: the agent's report; else the operator who reset it. */
  by: AuditActor | null;
}
export type GpuHealthListener = (change: GpuHealthChange) => Promise<void>;

export class FleetEvents {
  readonly #desired = new Set<FleetListener>();
  readonly #deleted = new Set<FleetListener>();
  readonly #greeted = new Set<GreetedListener>();

  onAgentGreeted(listener: GreetedListener): () => void {
    this.#greeted.add(listener);
    return () => this.#greeted.delete(listener);
  }

  async agentGreeted(hostId: string, agentVersion: string | null): Promise<void> {
    await Promise.allSettled([...this.#greeted].map((listener) => listener(hostId, agentVersion)));
  }
  readonly #gpuHealth = new Set<GpuHealthListener>();

  onDesiredChanged(listener: FleetListener): () => void {
    this.#desired.add(listener);
    return () => this.#desired.delete(listener);
  }

  onHostDeleted(listener: FleetListener): () => void {
    this.#deleted.add(listener);
    return () => this.#deleted.delete(listener);
  }

  /** A GPU's kept health changed (the agent reported worse, or an operator reset it). */
  onGpuHealthChanged(listener: GpuHealthListener): () => void {
    this.#gpuHealth.add(listener);
    return () => this.#gpuHealth.delete(listener);
  }

  async gpuHealthChanged(change: GpuHealthChange): Promise<void> {
    await Promise.allSettled([...this.#gpuHealth].map((listener) => listener(change)));
  }

  async desiredChanged(hostId: string): Promise<void> {
    await Promise.allSettled([...this.#desired].map((listener) => listener(hostId)));
  }

  async hostDeleted(hostId: string): Promise<void> {
    await Promise.allSettled([...this.#deleted].map((listener) => listener(hostId)));
  }
}
