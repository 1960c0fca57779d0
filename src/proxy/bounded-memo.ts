/**
 * A memo bounded in bytes: what the pipeline remembers between requests (routings, callers,
 * refusals), each kept within its own byte budget whatever the traffic.
 *
 * An LRU (lru-cache with maxSize and sizeCalculation, as the memory tier) without TTLs: `get` is
 * on the hit path, so it is one lookup with a reused options object; no clock, no allocation.
 * Sizes are estimates (the key's characters plus a fixed overhead per entry): what matters is that
 * an attacker's bytes are counted, not the exact V8 layout.
 */
import { LRUCache } from 'lru-cache';

/** lru-cache writes `status` into its options object; one shared object spares an allocation per get. */
const GET_OPTIONS: { status?: unknown } = {};

export interface MemoStats {
  readonly entries: number;
  readonly bytes: number;
}

// lru-cache's own constraint on values (anything but null and undefined).
// eslint-disable-next-line @typescript-eslint/no-empty-object-type
export class BoundedMemo<V extends {}> {
  readonly #lru: LRUCache<string, V>;

  /**
   * `sizeOf`: the estimated bytes of an entry (at least 1). An entry larger than `maxEntryBytes`
   * (default: maxBytes) is not kept, so one entry can never evict all the others.
   */
  constructor(maxBytes: number, sizeOf: (value: V, key: string) => number, maxEntryBytes = maxBytes) {
    this.#lru = new LRUCache<string, V>({
      maxSize: maxBytes,
      maxEntrySize: Math.min(maxEntryBytes, maxBytes),
      sizeCalculation: (value, key) => Math.max(1, Math.ceil(sizeOf(value, key))),
    });
  }

  /** The hit path: one lookup, counted as a use. */
  get(key: string): V | undefined {
    return this.#lru.get(key, GET_OPTIONS as object);
  }

  set(key: string, value: V): V {
    this.#lru.set(key, value);
    return value;
  }

  delete(key: string): boolean {
    return this.#lru.delete(key);
  }

  /** Drops every entry whose value matches; a scan of the whole (bounded) memo, for rare events. */
  deleteWhere(matches: (value: V) => boolean): void {
    for (const [key, value] of this.#lru.entries()) if (matches(value)) this.#lru.delete(key);
  }

  clear(): void {
    this.#lru.clear();
  }

  stats(): MemoStats {
    return { entries: this.#lru.size, bytes: this.#lru.calculatedSize };
  }
}
