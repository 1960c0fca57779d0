/**
 * The shared tier: cache entries in Redis (compressed, optionally encrypted: codec.ts), a set
 * per tag, and the sets of pages that can derive answers (derive-sets.ts), over the connection all Redis roles share (redis-connection.ts). Entries only:
 * the fill lock, shared values, secrets and the invalidation channel are their own roles
 * (redis.ts builds them all).
 *
 * Redis is an optimisation, never a dependency: every error, timeout or disconnection is a
 * miss (the connection's failure rule); no method rejects. An entry is served only if it was
 * written under the key it is read from and is something tm-cache would store (codec.ts,
 * entry.ts): checked once here, when read back, never on a memory hit.
 */
import { DEFAULT_MAX_ENTRY_BYTES } from '../../config/schema.js';
import type { SharedTierBudget } from '../budget.js';
import { boundClaims } from './claims.js';
import { addToDeriveSets, DERIVE_SCRIPTS, deriveCandidates, deriveSetKey } from './derive-sets.js';
import { encodeEntry, openEntry, type ClaimCheck } from './codec.js';
import { bodyLengthOf, expiresAt, type CacheEntry } from '../entry.js';
import { describeKey } from '../key.js';
import type { ClaimLimits } from '../policy.js';
import type { RedisConnection, RedisFailureStats } from './connection.js';
import type { CacheTier } from '../tier.js';

export interface RedisTierOptions {
  /** Entries with a larger body are not stored. */
  maxEntryBytes?: number;
  /** Clock in ms since epoch for TTLs and expiry; injectable for tests. */
  now?: () => number;
  /** What an entry read back may claim, per cache key (policy.ts `claimLimitsOf`); unbounded without. */
  claimLimits?: (key: string) => ClaimLimits;
}

/** What a stored entry can answer besides its own question (derive/index.ts `sharedNames`): names, or undefined for nothing. */
export type DerivableNames = (key: string, entry: CacheEntry) => readonly string[] | undefined;

export interface RedisTierStats extends RedisFailureStats {
  hits: number;
  misses: number;
}

/** Keys per UNLINK when a tag is invalidated on a standalone server. */
const UNLINK_BATCH = 500;

const SCRIPTS = {
  // Adds a member and extends (never shortens) the set's TTL to the member's: the set lives as
  // long as its longest-lived entry. PTTL is -1 for a set just created without TTL.
  tmcTagAdd: {
    numberOfKeys: 1,
    lua: `redis.call('SADD', KEYS[1], ARGV[1])
local ttl = tonumber(ARGV[2])
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
return 1`,
  },
};

interface TagCommands {
  tmcTagAdd(tagKey: string, member: string, ttlMs: number): Promise<number>;
}

export class RedisTier implements CacheTier {
  readonly name = 'redis' as const;
  readonly connection: RedisConnection;
  /** Entries with a larger body are not stored (`cache.redis.maxEntryBytes`). */
  readonly maxEntryBytes: number;
  readonly #now: () => number;
  #claimLimits: ((key: string) => ClaimLimits) | undefined;
  /** Derived answers shared across replicas: what an entry written can answer (derive-sets.ts); none: not recorded. */
  #derivable: DerivableNames | undefined;
  /** Writes not yet acknowledged, per key: the fill lock's unlock waits for them. */
  readonly #pendingWrites = new Map<string, Promise<void>>();
  #hits = 0;
  #misses = 0;

  constructor(connection: RedisConnection, options: RedisTierOptions = {}) {
    this.connection = connection;
    this.maxEntryBytes = options.maxEntryBytes ?? DEFAULT_MAX_ENTRY_BYTES;
    this.#now = options.now ?? Date.now;
    this.#claimLimits = options.claimLimits;
    connection.defineScripts(SCRIPTS);
    connection.defineScripts(DERIVE_SCRIPTS);
  }

  /**
   * From now on, an entry written is also recorded under each name `derivable` gives it (the
   * sets of derive-sets.ts), so that another replica finds it as the source of a derived answer.
   */
  recordDerivable(derivable: DerivableNames): void {
    this.#derivable = derivable;
  }

  /** The keys of up to `limit` pages recorded under `name` still fresh at `now`: one command, a hint to be checked (derive-sets.ts). */
  derivableFrom(name: string, query: { readonly now: number; readonly limit: number }, budget?: SharedTierBudget): Promise<string[]> {
    if (this.#derivable === undefined) return Promise.resolve([]);
    return deriveCandidates(this.connection, name, query, budget);
  }

  /** New limits of what entries read back may claim (a reload changed the freshness rules). */
  limitClaims(claimLimits: (key: string) => ClaimLimits): void {
    this.#claimLimits = claimLimits;
  }

  /** The tier's clock (the one that judges expiry). */
  now(): number {
    return this.#now();
  }

  async get(key: string, now?: number, budget?: SharedTierBudget): Promise<CacheEntry | undefined> {
    const entry = await this.peek(key, now, budget);
    if (entry) this.#hits++;
    else this.#misses++;
    return entry;
  }

  /**
   * As `get`, without counting a hit or a miss. (Redis keeps no recency we could spare: any read
   * refreshes its own idle time, which only matters under an LRU maxmemory-policy.)
   */
  async peek(key: string, now?: number, budget?: SharedTierBudget): Promise<CacheEntry | undefined> {
    if (!this.connection.guardFor('get')) return undefined;
    const stored = await this.connection.call('get', (c) => c.getBuffer(this.connection.entryKey(key)), budget);
    return stored ? this.fromStored(key, stored, now) : undefined;
  }

  /** Never rejects; resolves once Redis acknowledged (or the write was given up, `budget` spent included). */
  set(key: string, entry: CacheEntry, budget?: SharedTierBudget): Promise<void> {
    const write = this.#write(key, entry, budget);
    this.#pendingWrites.set(key, write);
    void write.finally(() => {
      if (this.#pendingWrites.get(key) === write) this.#pendingWrites.delete(key);
    });
    return write;
  }

  /** This replica's write of `key` not yet acknowledged, if any (never rejects). */
  pendingWrite(key: string): Promise<void> | undefined {
    return this.#pendingWrites.get(key);
  }

  async delete(key: string): Promise<void> {
    await this.tryDelete(key);
  }

  async tryDelete(key: string): Promise<boolean> {
    return (await this.connection.call('delete', (c) => c.unlink(this.connection.entryKey(key)))) !== undefined;
  }

  /**
   * Deletes every entry in the tag's set, then the set. Not atomic across slots (a cluster
   * cannot be), so an entry written for the tag in that instant survives; the fill that wrote
   * it ran before the change it now misses, as any cache race. Memberships are not removed
   * when an entry is rewritten with other tags (that would cost a read and a decode per write),
   * so a tag may also drop such an entry: one extra miss.
   */
  async invalidateTag(tag: string): Promise<number> {
    return (await this.tryInvalidateTag(tag)) ?? 0;
  }

  /** As `invalidateTag`; undefined when Redis could not be told (the set not read, or an UNLINK lost). */
  async tryInvalidateTag(tag: string): Promise<number | undefined> {
    const tagKey = this.connection.tagKey(tag);
    const members = await this.connection.call('tag', (c) => c.smembers(tagKey));
    if (members === undefined) return undefined;
    const dropped = await this.#unlinkAll(members);
    // Kept when an UNLINK was lost: the retry needs its members.
    if (dropped === undefined) return undefined;
    // The set itself left behind costs nothing but extra misses later: no reason to retry.
    await this.connection.call('tag', (c) => c.unlink(tagKey));
    return dropped;
  }

  /**
   * Drops every entry under this tier's prefix: SCAN (each master of a cluster) for entry keys,
   * `<prefix>{<key>}`, and UNLINK what it finds, in batches. Tag sets expire by themselves. An
   * operator's purge of everything, not a request path: it may take a while on a large Redis.
   */
  async purgeAll(): Promise<number> {
    return (await this.tryPurgeAll()) ?? 0;
  }

  /** As `purgeAll`; undefined when a SCAN or an UNLINK did not get through (a retry starts over). */
  async tryPurgeAll(): Promise<number | undefined> {
    const pattern = `${escapeGlob(this.connection.keyPrefix)}{*}`;
    let dropped = 0;
    for (const node of this.connection.masters()) {
      let cursor = '0';
      do {
        const page = await this.connection.call('purge', () => node.scan(cursor, 'MATCH', pattern, 'COUNT', 1_000));
        if (page === undefined) return undefined;
        cursor = page[0];
        const unlinked = await this.#unlinkAll(page[1]);
        if (unlinked === undefined) return undefined;
        dropped += unlinked;
      } while (cursor !== '0');
    }
    return dropped;
  }

  /** The connection's failure counts (every role's), with this tier's hits and misses. */
  stats(): RedisTierStats {
    return { ...this.connection.stats(), hits: this.#hits, misses: this.#misses };
  }

  /** Lets pending writes land (bounded by the command timeout); the connection is its owner's to close. */
  async close(): Promise<void> {
    await Promise.allSettled([...this.#pendingWrites.values()]);
  }

  /**
   * The stored value of `key` as an entry, if it was written for that key and is valid, with
   * its freshness, stale windows and tags bounded by this reader's settings (claims.ts), and
   * not expired by our clock after that; otherwise a miss (refused: counted and logged, left in
   * Redis).
   */
  fromStored(key: string, stored: Buffer, now?: number): CacheEntry | undefined {
    const guard = this.connection.guardFor('decode');
    if (!guard) return undefined;
    const at = now ?? this.#now();
    const entryKey = this.connection.entryKey(key);
    const decoded = openEntry(stored, guard, entryKey, this.#claimCheck(key, at));
    if (decoded.kind !== 'ok') return this.connection.refuse(entryKey, decoded);
    return expiresAt(decoded.value) > at ? decoded.value : undefined;
  }

  #claimCheck(key: string, now: number): ClaimCheck | undefined {
    const limits = this.#claimLimits?.(key);
    return limits && ((meta) => boundClaims(meta, limits, now));
  }

  async #write(key: string, entry: CacheEntry, budget: SharedTierBudget | undefined): Promise<void> {
    const ttlMs = Math.ceil(expiresAt(entry) - this.#now());
    if (ttlMs <= 0 || bodyLengthOf(entry) > this.maxEntryBytes) return;
    // Checked before encoding: no point compressing and sealing for a connection that is down.
    if (!this.connection.healthy()) return this.connection.recordUnavailable('set');
    const guard = this.connection.guardFor('set');
    if (!guard || !this.connection.canSend() || budget?.sharedTierSpent) return;
    const entryKey = this.connection.entryKey(key);
    let stored: Buffer;
    try {
      stored = await encodeEntry(entry, guard, entryKey);
    } catch (error) {
      this.connection.failures.record('encode', error, describeKey(key));
      return;
    }
    const deriveSets = (this.#derivable?.(key, entry) ?? []).map((name) => deriveSetKey(this.connection, name));
    const times = { freshUntil: entry.freshUntil, now: this.#now() };
    // Redis expires the entry by itself at expiresAt (PX); each tag set lives as long as its
    // longest-lived member (the script only ever extends its TTL), each set of derivable pages
    // as long as its freshest member.
    await this.connection.call(
      'set',
      (c) =>
        Promise.all([
          c.set(entryKey, stored, 'PX', ttlMs),
          ...entry.tags.map((tag) => (c as unknown as TagCommands).tmcTagAdd(this.connection.tagKey(tag), entryKey, ttlMs)),
          ...addToDeriveSets(c, deriveSets, key, times),
        ]),
      budget,
    );
  }

  /** How many of `keys` were unlinked; undefined when an UNLINK did not get through. */
  async #unlinkAll(keys: string[]): Promise<number | undefined> {
    if (keys.length === 0) return 0;
    const unlink = (batch: string[]): Promise<number | undefined> => this.connection.call('tag', (c) => c.unlink(...batch));
    // In a cluster, entry keys live in different slots: one UNLINK each (a multi-key one is CROSSSLOT).
    const batches = this.connection.mode === 'cluster' ? keys.map((k) => [k]) : chunk(keys, UNLINK_BATCH);
    const counts = await Promise.all(batches.map(unlink));
    return counts.includes(undefined) ? undefined : counts.reduce<number>((sum, n) => sum + n!, 0);
  }
}

/** A literal string as a Redis glob pattern (SCAN MATCH). */
function escapeGlob(text: string): string {
  return text.replace(/[*?[\]\\]/g, (c) => `\\${c}`);
}

function chunk<T>(items: T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}
