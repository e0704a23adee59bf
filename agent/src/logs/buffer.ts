import type { LogEntry, LogLoss, LogsComplete } from '@anvil/shared/protocol';

/** Approximate wire size of an entry: the line plus its JSON envelope fields. */
export function entryBytes(entry: LogEntry): number {
  return Buffer.byteLength(entry.line) + entry.workloadId.length + entry.containerId.length + 80;
}

/**
 * Log lines waiting to be sent, bounded by bytes. When full (the control plane is unreachable for a
 * long time), the oldest lines go first and every dropped line is counted per container, so the
 * loss is reported rather than silent.
 */
export class LogBuffer {
  #entries: LogEntry[] = [];
  #head = 0;
  #bytes = 0;
  readonly #losses = new Map<string, LogLoss>();
  /** Entries waiting per container, so a container's end is announced only after its last line went out. */
  readonly #waiting = new Map<string, number>();
  /** Containers whose logs were read to the end, by container id (their workload ids as values). */
  readonly #ended = new Map<string, string>();

  constructor(readonly maxBytes: number) {}

  get bytes(): number {
    return this.#bytes;
  }

  get length(): number {
    return this.#entries.length - this.#head;
  }

  push(entry: LogEntry): void {
    const size = entryBytes(entry);
    while (this.length > 0 && this.#bytes + size > this.maxBytes) this.#dropOldest();
    if (size > this.maxBytes) {
      this.#countLoss(entry);
      return;
    }
    this.#entries.push(entry);
    this.#bytes += size;
    this.#count(entry.containerId, 1);
  }

  /** Remove and return up to `maxBytes` / `maxEntries` from the front, oldest first. */
  take(maxBytes: number, maxEntries: number): LogEntry[] {
    const out: LogEntry[] = [];
    let bytes = 0;
    while (this.length > 0 && out.length < maxEntries) {
      const entry = this.#entries[this.#head]!;
      const size = entryBytes(entry);
      if (out.length > 0 && bytes + size > maxBytes) break;
      out.push(entry);
      bytes += size;
      this.#shift(size);
      this.#count(entry.containerId, -1);
    }
    return out;
  }

  /** Put entries that could not be sent back at the front, in order (they still count against the bound). */
  unshift(entries: LogEntry[]): void {
    if (entries.length === 0) return;
    this.#entries = [...entries, ...this.#entries.slice(this.#head)];
    this.#head = 0;
    this.#bytes += entries.reduce((n, e) => n + entryBytes(e), 0);
    for (const e of entries) this.#count(e.containerId, 1);
    while (this.#bytes > this.maxBytes && this.length > 0) this.#dropOldest();
  }

  /**
   * The container's logs were read to the end (it stopped): once every line of it pushed so far has been
   * taken, takeEnded() names it, so the control plane learns that nothing more of it will come.
   */
  end(workloadId: string, containerId: string): void {
    this.#ended.set(containerId, workloadId);
  }

  /** Ended containers none of whose lines still wait here; they are forgotten (restoreEnded if unsent). */
  takeEnded(): LogsComplete[] {
    const out: LogsComplete[] = [];
    for (const [containerId, workloadId] of this.#ended) {
      if ((this.#waiting.get(containerId) ?? 0) > 0) continue;
      out.push({ workloadId, containerId });
      this.#ended.delete(containerId);
    }
    return out;
  }

  /** Ends taken but not sent: announced next time. */
  restoreEnded(ended: LogsComplete[]): void {
    for (const e of ended) this.#ended.set(e.containerId, e.workloadId);
  }

  /** Losses counted since the last call, per container. */
  takeLosses(): LogLoss[] {
    const out = [...this.#losses.values()];
    this.#losses.clear();
    return out;
  }

  /** Losses taken but not reported (the send failed): merge them back to report later. */
  restoreLosses(losses: LogLoss[]): void {
    for (const loss of losses) {
      const key = loss.containerId ?? '';
      const current = this.#losses.get(key);
      if (!current) {
        this.#losses.set(key, { ...loss });
        continue;
      }
      current.lines += loss.lines;
      current.bytes += loss.bytes;
      current.firstTs = loss.firstTs ?? current.firstTs;
    }
  }

  #dropOldest(): void {
    const entry = this.#entries[this.#head]!;
    this.#shift(entryBytes(entry));
    this.#count(entry.containerId, -1);
    this.#countLoss(entry);
  }

  #count(containerId: string, delta: number): void {
    const next = (this.#waiting.get(containerId) ?? 0) + delta;
    if (next > 0) this.#waiting.set(containerId, next);
    else this.#waiting.delete(containerId);
  }

  #shift(size: number): void {
    this.#head += 1;
    this.#bytes -= size;
    // Compact now and then so the array does not grow without bound; amortised O(1) per entry.
    if (this.#head > 1024 && this.#head * 2 > this.#entries.length) {
      this.#entries = this.#entries.slice(this.#head);
      this.#head = 0;
    }
  }

  #countLoss(entry: LogEntry): void {
    const loss = this.#losses.get(entry.containerId) ?? {
      workloadId: entry.workloadId,
      containerId: entry.containerId,
      lines: 0,
      bytes: 0,
      firstTs: entry.ts,
      lastTs: entry.ts,
    };
    loss.lines += 1;
    loss.bytes += Buffer.byteLength(entry.line);
    loss.lastTs = entry.ts;
    this.#losses.set(entry.containerId, loss);
  }
}
