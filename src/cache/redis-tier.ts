/**
 * The shared tier: entries in Redis (compressed, optionally encrypted: codec.ts), a set per
 * tag, an invalidation channel so every replica drops what another invalidated, plus the small
 * shared values the proxy needs (identities, the HMAC secret, fill locks: redis-shared.ts).
 *
 * Redis is an optimisation, never a dependency: every error, timeout or disconnection is a
 * miss, counted and logged at most once per interval per kind (failure-log.ts); no method
 * rejects, and none waits longer than the command timeout (redis-client.ts).
 *
 * Key layout (prefix `tmc:`): `tmc:{<key>}` entry, `tmc:{<key>}:lock` its fill lock (the hash
 * tag puts both in one cluster slot, so one script can read both), `tmc:tag:<tag>` the set of
 * entry keys carrying a tag, `tmc:json:<ns>:<key>` shared values, `tmc:secret:<name>` secrets.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { decodeEntry, encodeEntry } from './codec.js';
import { bodyLengthOf, expiresAt, type CacheEntry } from './entry.js';
import { FailureLog, silentLogger, type FailureCounts, type TierLogger } from './failure-log.js';
import { assertKeyring, type Keyring } from './keyring.js';
import { createRedisClient, type RedisClient, type RedisConnectionOptions } from './redis-client.js';
import { RedisShared } from './redis-shared.js';
import type { CacheTier } from './tier.js';

export type { InvalidationListener, InvalidationMessage } from './redis-shared.js';

export interface RedisTierOptions extends RedisConnectionOptions {
  /** Prepended to every key and to the invalidation channel; default `tmc:`. */
  keyPrefix?: string;
  /** Seals every stored value (AES-256-GCM); without it values are compressed, not encrypted. */
  keyring?: Keyring;
  logger?: TierLogger;
  /** At most one log line per failure kind per this interval. */
  logIntervalMs?: number;
  /** Entries with a larger body are not stored. */
  maxEntryBytes?: number;
  /** Clock in ms since epoch for TTLs and expiry; injectable for tests. */
  now?: () => number;
}

export interface RedisTierStats extends FailureCounts {
  hits: number;
  misses: number;
  /** Alias of `total`: every error, timeout, disconnection or undecodable value. */
  errors: number;
}

export interface RedisTierStatus {
  healthy: boolean;
  /** ioredis connection state: connecting, ready, reconnecting, end, ... */
  connection: string;
  subscriber?: string;
  lastError?: FailureCounts['lastError'];
}

export const DEFAULT_KEY_PREFIX = 'tmc:';
export const DEFAULT_REDIS_MAX_ENTRY_BYTES = 8 * 1024 * 1024;
/** Keys per UNLINK when a tag is invalidated on a standalone server. */
const UNLINK_BATCH = 500;
const WAIT_FIRST_POLL_MS = 5;
const WAIT_MAX_POLL_MS = 50;

export class RedisTier extends RedisShared implements CacheTier {
  readonly name = 'redis' as const;
  readonly #keyring: Keyring | undefined;
  readonly #maxEntryBytes: number;
  /** Writes not yet acknowledged, per key: `unlock` waits for them (see `unlock`). */
  readonly #pendingWrites = new Map<string, Promise<void>>();
  #hits = 0;
  #misses = 0;

  constructor(options: RedisTierOptions) {
    if (options.keyring) assertKeyring(options.keyring);
    const client = createRedisClient(options, 'commands');
    const now = options.now ?? Date.now;
    super({
      client,
      makeSubscriber: () => createRedisClient(options, 'subscriber'),
      prefix: options.keyPrefix ?? DEFAULT_KEY_PREFIX,
      failures: new FailureLog(options.logger ?? silentLogger, options.logIntervalMs),
      logger: options.logger ?? silentLogger,
      keyring: options.keyring,
      origin: randomUUID(),
      now,
    });
    this.#keyring = options.keyring;
    this.#maxEntryBytes = options.maxEntryBytes ?? DEFAULT_REDIS_MAX_ENTRY_BYTES;
  }

  async get(key: string, now?: number): Promise<CacheEntry | undefined> {
    const entry = await this.peek(key, now);
    if (entry) this.#hits++;
    else this.#misses++;
    return entry;
  }

  /**
   * As `get`, without counting a hit or a miss. (Redis keeps no recency we could spare: any read
   * refreshes its own idle time, which only matters under an LRU maxmemory-policy.)
   */
  peek(key: string, now?: number): Promise<CacheEntry | undefined> {
    return this.#readEntry(key, undefined, now);
  }

  /** Never rejects; resolves once Redis acknowledged (or the write was given up). */
  set(key: string, entry: CacheEntry): Promise<void> {
    const write = this.#write(key, entry);
    this.#pendingWrites.set(key, write);
    void write.finally(() => {
      if (this.#pendingWrites.get(key) === write) this.#pendingWrites.delete(key);
    });
    return write;
  }

  /** Drops the entry here and, through the channel, from every replica's memory tier. */
  async delete(key: string): Promise<void> {
    await this.call('delete', (c) => c.unlink(this.entryKey(key)));
    await this.publishInvalidation({ kind: 'key', key });
  }

  /**
   * Deletes every entry in the tag's set, then the set, then tells the other replicas. Not
   * atomic across slots (a cluster cannot be), so an entry written for the tag in that instant
   * survives; the fill that wrote it ran before the change it now misses, as any cache race.
   * Memberships are not removed when an entry is rewritten with other tags (that would cost a
   * read and a decode per write), so a tag may also drop such an entry: one extra miss.
   */
  async invalidateTag(tag: string): Promise<number> {
    const tagKey = this.tagKey(tag);
    const members = (await this.call('tag', (c) => c.smembers(tagKey))) ?? [];
    const dropped = await this.#unlinkAll(members);
    await this.call('tag', (c) => c.unlink(tagKey));
    await this.publishInvalidation({ kind: 'tag', tag });
    return dropped;
  }

  stats(): RedisTierStats {
    const counts = this.failures.counts();
    return { ...counts, errors: counts.total, hits: this.#hits, misses: this.#misses };
  }

  status(): RedisTierStatus {
    const status: RedisTierStatus = { healthy: this.healthy(), connection: this.client.status };
    if (this.subscriber) status.subscriber = this.subscriber.status;
    const { lastError } = this.failures.counts();
    if (lastError) status.lastError = lastError;
    return status;
  }

  /** Lets pending writes land (bounded by the command timeout), then disconnects. */
  override async close(): Promise<void> {
    await Promise.allSettled([...this.#pendingWrites.values()]);
    await super.close();
  }

  /**
   * Cross-replica fill lock (SET NX PX): the token if this replica may fill `key`, undefined
   * if another one holds the lock, or if Redis cannot answer (then `waitFor` returns at once).
   */
  async tryLock(key: string, ttlMs: number): Promise<string | undefined> {
    const token = randomBytes(16).toString('base64url');
    const result = await this.call('lock', (c) => c.set(this.lockKey(key), token, 'PX', Math.max(1, Math.ceil(ttlMs)), 'NX'));
    return result === 'OK' ? token : undefined;
  }

  /**
   * Releases the lock if it still holds `token`. Waits for this replica's pending write of the
   * key first: `set` is fire-and-forget, and a waiter that saw the lock gone before the entry
   * landed would fill again for nothing.
   */
  async unlock(key: string, token: string): Promise<void> {
    await this.#pendingWrites.get(key);
    await this.call('lock', (c) => this.scripts(c).tmcUnlock(this.lockKey(key), token));
  }

  /**
   * Waits for another replica's fill of `key`, at most `timeoutMs`; undefined at the timeout,
   * or at once if Redis is unavailable, so the caller fills itself.
   *
   * Polling (5 ms doubling to 50 ms, one script call each) rather than a pub/sub notice on
   * fill: a notice would need a subscription per waited key or a broadcast of every fill to
   * every replica (in a cluster, to every node), and a lost message would leave waiters to the
   * timeout. Fills take an upstream round trip (tens to hundreds of ms), so a poll adds at
   * most its interval, and waiting is rare: within a replica, fills are already coalesced.
   */
  async waitFor(key: string, timeoutMs: number): Promise<CacheEntry | undefined> {
    const deadline = performance.now() + timeoutMs;
    for (let delayMs = WAIT_FIRST_POLL_MS; ; delayMs = Math.min(delayMs * 2, WAIT_MAX_POLL_MS)) {
      const polled = await this.call('lock', (c) => this.scripts(c).tmcPollFillBuffer(this.lockKey(key), this.entryKey(key)));
      if (polled === undefined) return undefined;
      if (polled !== -1) return polled === null || typeof polled === 'number' ? undefined : this.#readEntry(key, polled);
      const remainingMs = deadline - performance.now();
      if (remainingMs <= 0) return undefined;
      await sleep(Math.min(delayMs, remainingMs));
    }
  }

  /** The stored entry if it decodes and has not expired by our clock; otherwise a miss. */
  async #readEntry(key: string, stored?: Buffer | null, now?: number): Promise<CacheEntry | undefined> {
    const bytes = stored === undefined ? await this.call('get', (c) => c.getBuffer(this.entryKey(key))) : stored;
    if (!bytes) return undefined;
    const entry = await decodeEntry(bytes, this.#keyring);
    if (!entry) {
      this.failures.record('decode', new Error('stored value does not decode (version, key id or tampering)'), { key });
      return undefined;
    }
    return expiresAt(entry) > (now ?? this.now()) ? entry : undefined;
  }

  async #write(key: string, entry: CacheEntry): Promise<void> {
    const ttlMs = Math.ceil(expiresAt(entry) - this.now());
    if (ttlMs <= 0 || bodyLengthOf(entry) > this.#maxEntryBytes) return;
    // Checked before encoding: no point compressing and sealing for a connection that is down.
    if (!this.healthy()) return this.recordUnavailable('set');
    let stored: Buffer;
    try {
      stored = await encodeEntry(entry, this.#keyring);
    } catch (error) {
      this.failures.record('encode', error, { key });
      return;
    }
    const entryKey = this.entryKey(key);
    // Redis expires the entry by itself at expiresAt (PX); each tag set lives as long as its
    // longest-lived member (the script only ever extends its TTL).
    await this.call('set', (c) =>
      Promise.all([
        c.set(entryKey, stored, 'PX', ttlMs),
        ...entry.tags.map((tag) => this.scripts(c).tmcTagAdd(this.tagKey(tag), entryKey, ttlMs)),
      ]),
    );
  }

  async #unlinkAll(keys: string[]): Promise<number> {
    if (keys.length === 0) return 0;
    const counts =
      this.mode === 'cluster'
        ? // Entry keys live in different slots: one UNLINK each (a multi-key one is CROSSSLOT).
          await Promise.all(keys.map((k) => this.call('tag', (c) => c.unlink(k))))
        : await Promise.all(chunk(keys, UNLINK_BATCH).map((batch) => this.call('tag', (c) => c.unlink(...batch))));
    return counts.reduce<number>((sum, n) => sum + (n ?? 0), 0);
  }
}

function chunk<T>(items: T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}
