/**
 * The first tier: an in-process LRU bounded in bytes. Its `get` is the hit path of every
 * request, so it is a single synchronous lookup: no promise, no allocation, no hashing.
 * Everything else (the tag index, sizes, expiry) is paid for on `set` and on eviction.
 * Every CacheTier method answers synchronously here (tier.ts).
 */
import { LRUCache } from 'lru-cache';
import { DEFAULT_MAX_BYTES, DEFAULT_MAX_ENTRY_BYTES } from '../config/schema.js';
import { bodyLengthOf, expiresAt, type CacheEntry } from './entry.js';
import type { CacheTier } from './tier.js';

/**
 * What an entry costs besides its body: the headers record, the metadata object, the LRU's
 * slots and the tag index. A fixed estimate: measuring it per entry would cost more than the
 * precision is worth, and bodies (kilobytes) dominate anyway.
 */
export const ENTRY_OVERHEAD_BYTES = 1024;

/**
 * One options object for every get (and peek): lru-cache would otherwise allocate one per call.
 * It writes `status` into it (undefined unless someone subscribes to its metrics channel), so
 * it must not be frozen; nothing else reads it.
 */
const GET_OPTIONS: { status?: unknown } = {};

export interface MemoryTierOptions {
  /** Upper bound of the sum of entry sizes (body + ENTRY_OVERHEAD_BYTES). */
  maxBytes?: number;
  /** Entries larger than this (body + overhead) are not stored. */
  maxEntryBytes?: number;
  /** Clock in ms since epoch; injectable so tests move time instead of sleeping. */
  now?: () => number;
  /** Called for each entry evicted to make room (metrics). */
  onEvict?: () => void;
  /** Told of every entry stored and dropped, in step with the LRU (the index of derived answers: src/cache/derive/index.ts). */
  observer?: MemoryObserver | undefined;
}

/** What watches the memory tier's contents: told after an entry is stored, and as one leaves (lru-cache's `dispose`, with its reason). */
export interface MemoryObserver {
  stored(key: string, entry: CacheEntry): void;
  dropped(key: string, entry: CacheEntry, reason: LRUCache.DisposeReason): void;
}

/** What the LRU holds per key: the entry, and how often it was served from here. */
interface Slot {
  readonly entry: CacheEntry;
  hits: number;
}

/** One entry as the admin API lists it (no body). */
export interface ListedEntry {
  readonly key: string;
  readonly entry: CacheEntry;
  readonly hits: number;
}

export interface MemoryTierStats {
  entries: number;
  bytes: number;
}

export class MemoryTier implements CacheTier {
  readonly name = 'memory' as const;
  readonly maxBytes: number;
  readonly maxEntryBytes: number;
  readonly #now: () => number;
  readonly #lru: LRUCache<string, Slot>;
  /** tag → keys carrying it; kept in step with the LRU by `set` and `dispose`. */
  readonly #keysByTag = new Map<string, Set<string>>();
  readonly #observer: MemoryObserver | undefined;

  constructor(options: MemoryTierOptions = {}) {
    this.maxBytes = options.maxBytes ?? DEFAULT_MAX_BYTES;
    this.maxEntryBytes = Math.min(options.maxEntryBytes ?? DEFAULT_MAX_ENTRY_BYTES, this.maxBytes);
    if (!(this.maxBytes > ENTRY_OVERHEAD_BYTES)) {
      throw new Error(`maxBytes must be more than ${ENTRY_OVERHEAD_BYTES}, got ${this.maxBytes}`);
    }
    this.#now = options.now ?? Date.now;
    const onEvict = options.onEvict;
    const observer = (this.#observer = options.observer);
    this.#lru = new LRUCache<string, Slot>({
      maxSize: this.maxBytes,
      sizeCalculation: (slot) => entrySizeBytes(slot.entry),
      // No lru-cache TTLs: with them every get reads the clock. Expiry is checked here instead,
      // against the entry's own times, only when an entry is found (see get).
      allowStale: false,
      updateAgeOnGet: false,
      dispose: (slot, key, reason) => {
        this.#unindex(key, slot.entry);
        observer?.dropped(key, slot.entry, reason);
        if (reason === 'evict') onEvict?.();
      },
    });
  }

  /**
   * The hit path: the live entry or undefined, synchronously. Counts as a use for the LRU
   * order. An entry past `expiresAt` is never returned (and is dropped on the way).
   */
  get(key: string, now?: number): CacheEntry | undefined {
    const slot = this.#lru.get(key, GET_OPTIONS as object);
    if (slot === undefined) return undefined;
    const entry = slot.entry;
    if (expiresAt(entry) > (now ?? this.#now())) {
      slot.hits++;
      return entry;
    }
    this.#lru.delete(key);
    return undefined;
  }

  /** As `get`, but the LRU order stays as it was; an expired entry is left for `get` or eviction. */
  peek(key: string, now?: number): CacheEntry | undefined {
    const entry = this.#lru.peek(key, GET_OPTIONS as object)?.entry;
    return entry !== undefined && expiresAt(entry) > (now ?? this.#now()) ? entry : undefined;
  }

  /** False when the entry was skipped (expired, or larger than `maxEntryBytes`). */
  set(key: string, entry: CacheEntry): boolean {
    const ttlMs = expiresAt(entry) - this.#now();
    if (ttlMs <= 0 || entrySizeBytes(entry) > this.maxEntryBytes) {
      // Still drop an older value under the key: the caller meant to replace it.
      this.#lru.delete(key);
      return false;
    }
    // Order matters: replacing a value disposes the old one (unindexing its tags) inside set,
    // so the new tags must be indexed after it.
    this.#lru.set(key, { entry, hits: 0 });
    for (const tag of entry.tags) {
      let keys = this.#keysByTag.get(tag);
      if (!keys) this.#keysByTag.set(tag, (keys = new Set()));
      keys.add(key);
    }
    if (this.#observer !== undefined && this.#lru.peek(key, GET_OPTIONS as object)?.entry === entry) this.#observer.stored(key, entry);
    return true;
  }

  /**
   * Swaps `next` in for `current` under `key` (e.g. the same answer with its gzip variant), only if
   * `current` is still what the key holds and `next` fits; otherwise leaves the key alone.
   */
  replace(key: string, current: CacheEntry, next: CacheEntry): boolean {
    const slot = this.#lru.peek(key, GET_OPTIONS as object);
    if (entrySizeBytes(next) > this.maxEntryBytes || slot?.entry !== current) return false;
    const hits = slot.hits;
    const stored = this.set(key, next);
    if (stored) this.#lru.peek(key, GET_OPTIONS as object)!.hits = hits;
    return stored;
  }

  /** True when an entry was there. */
  delete(key: string): boolean {
    return this.#lru.delete(key);
  }

  /** Costs one index lookup plus one delete per key carrying the tag. */
  invalidateTag(tag: string): number {
    const keys = this.#keysByTag.get(tag);
    if (!keys) return 0;
    let dropped = 0;
    // Copy first: each delete disposes and so edits the very set being walked.
    for (const key of [...keys]) if (this.#lru.delete(key)) dropped++;
    this.#keysByTag.delete(tag);
    return dropped;
  }

  /** Drops everything, e.g. when invalidation messages may have been missed. */
  clear(): void {
    this.#lru.clear();
    this.#keysByTag.clear();
  }

  /** The live entries, most recently used first; `filter` sees each key and entry. */
  list(filter: (key: string, entry: CacheEntry) => boolean, limit: number, now = this.#now()): { entries: ListedEntry[]; total: number } {
    const entries: ListedEntry[] = [];
    let total = 0;
    for (const [key, slot] of this.#lru.entries()) {
      if (expiresAt(slot.entry) <= now || !filter(key, slot.entry)) continue;
      total++;
      if (entries.length < limit) entries.push({ key, entry: slot.entry, hits: slot.hits });
    }
    return { entries, total };
  }

  stats(): MemoryTierStats {
    return { entries: this.#lru.size, bytes: this.#lru.calculatedSize };
  }

  close(): void {
    this.clear();
  }

  #unindex(key: string, entry: CacheEntry): void {
    for (const tag of entry.tags) {
      const keys = this.#keysByTag.get(tag);
      if (!keys) continue;
      keys.delete(key);
      if (keys.size === 0) this.#keysByTag.delete(tag);
    }
  }
}

/** What an entry holds: its identity body (decoded or to be), its gzip variant, and overhead. */
export function entrySizeBytes(entry: CacheEntry): number {
  return bodyLengthOf(entry) + (entry.gzip?.length ?? 0) + ENTRY_OVERHEAD_BYTES;
}
