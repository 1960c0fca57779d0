/**
 * Redis as the place replicas share things: the connection (with its failure rules), the
 * invalidation channel, small JSON values for identity and access decisions, and secrets every
 * replica must agree on. RedisTier adds the cache entries on top of it.
 *
 * Every method follows the tier rule: an error, a timeout or a disconnection is counted,
 * logged (rate-limited) and answered as "nothing there", never thrown.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { decodeValue, encodeValue } from './codec.js';
import type { FailureLog, TierLogger } from './failure-log.js';
import type { Keyring } from './keyring.js';
import { Cluster } from 'ioredis';
import type { RedisClient } from './redis-client.js';

/** What the channel carries. `all`: messages may have been missed (subscriber reconnected). */
export type InvalidationMessage = { kind: 'tag'; tag: string } | { kind: 'key'; key: string } | { kind: 'all' };
export type InvalidationListener = (message: InvalidationMessage) => void;

export interface RedisSharedParts {
  client: RedisClient;
  makeSubscriber: () => RedisClient;
  prefix: string;
  failures: FailureLog;
  logger: TierLogger;
  keyring: Keyring | undefined;
  /** This replica's id, sent with each invalidation so it can ignore its own. */
  origin: string;
  now: () => number;
}

/** Scripts, so that each check-and-act is atomic on the server. */
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
  // Deletes the lock only if it still holds our token: an expired lock taken over by another
  // replica must not be released by us.
  tmcUnlock: {
    numberOfKeys: 1,
    lua: `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`,
  },
  // -1 while the fill lock is held, else the entry (or nil): one round trip per poll, and no
  // entry bytes transferred while the other replica is still filling.
  tmcPollFill: {
    numberOfKeys: 2,
    lua: `if redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
return redis.call('GET', KEYS[2])`,
  },
};

export interface ScriptCommands {
  tmcTagAdd(tagKey: string, member: string, ttlMs: number): Promise<number>;
  tmcUnlock(lockKey: string, token: string): Promise<number>;
  tmcPollFillBuffer(lockKey: string, entryKey: string): Promise<number | Buffer | null>;
}

const SUBSCRIBE_POLL_MS = 20;

export class RedisShared {
  /** Every key and the channel start with it (layout: redis-tier.ts). */
  readonly keyPrefix: string;
  protected readonly client: RedisClient;
  protected readonly failures: FailureLog;
  protected readonly now: () => number;
  protected readonly mode: 'cluster' | 'single';
  protected subscriber: RedisClient | undefined;
  readonly #parts: RedisSharedParts;
  readonly #listeners = new Set<InvalidationListener>();
  readonly #channel: string;
  #subscribed = false;
  #closed = false;

  constructor(parts: RedisSharedParts) {
    this.#parts = parts;
    this.keyPrefix = parts.prefix;
    this.client = parts.client;
    this.failures = parts.failures;
    this.now = parts.now;
    this.mode = parts.client instanceof Cluster ? 'cluster' : 'single';
    this.#channel = `${parts.prefix}invalidate`;
    for (const [name, script] of Object.entries(SCRIPTS)) this.client.defineCommand(name, script);
    watchConnection(this.client, 'connection', parts.failures, parts.logger, () => this.#closed);
  }

  /** True while commands can be sent; for readiness reporting. */
  healthy(): boolean {
    return !this.#closed && this.client.status === 'ready';
  }

  /** Waits (bounded) until connected and, if subscribed, listening. False at the timeout. */
  async ready(timeoutMs: number): Promise<boolean> {
    const deadline = performance.now() + timeoutMs;
    while (!(this.healthy() && (this.subscriber === undefined || this.#subscribed))) {
      if (this.#closed || performance.now() >= deadline) return false;
      await sleep(SUBSCRIBE_POLL_MS);
    }
    return true;
  }

  /** Sends an invalidation to every replica listening now (pub/sub keeps nothing for later). */
  async publishInvalidation(message: InvalidationMessage): Promise<void> {
    const payload = JSON.stringify({ ...message, origin: this.#parts.origin });
    await this.call('publish', (c) => c.publish(this.#channel, payload));
  }

  /**
   * Calls `listener` for every invalidation published by another replica. The first call opens
   * the subscriber connection (a connection in subscribe mode can send nothing else).
   */
  onInvalidate(listener: InvalidationListener): () => void {
    this.#listeners.add(listener);
    if (!this.subscriber && !this.#closed) this.subscriber = this.#subscribe();
    return () => this.#listeners.delete(listener);
  }

  async getJson<T>(namespace: string, key: string): Promise<T | undefined> {
    const stored = await this.call('json', (c) => c.getBuffer(this.jsonKey(namespace, key)));
    const plain = stored ? decodeValue(stored, this.#parts.keyring) : undefined;
    if (!plain) return undefined;
    try {
      return JSON.parse(plain.toString('utf8')) as T;
    } catch (error) {
      this.failures.record('decode', error, { namespace });
      return undefined;
    }
  }

  /** Never rejects. `key` must already be an HMAC, never a raw credential. */
  async setJson(namespace: string, key: string, value: unknown, ttlMs: number): Promise<void> {
    if (!(ttlMs > 0)) return;
    if (!this.healthy()) return this.recordUnavailable('json');
    const stored = encodeValue(Buffer.from(JSON.stringify(value)), this.#parts.keyring);
    await this.call('json', (c) => c.set(this.jsonKey(namespace, key), stored, 'PX', Math.ceil(ttlMs)));
  }

  /**
   * The 32-byte secret every replica shares under `name`: the first replica to ask creates it
   * (SET NX), the others read the winner's. Undefined when Redis cannot answer or the stored
   * value does not open with this keyring; the caller decides what to do then.
   */
  async getOrCreateSecret(name: string): Promise<Buffer | undefined> {
    const secretKey = `${this.#parts.prefix}secret:${name}`;
    const candidate = randomBytes(32);
    const created = await this.call('secret', (c) => c.set(secretKey, encodeValue(candidate, this.#parts.keyring), 'NX'));
    if (created === 'OK') return candidate;
    if (created === undefined) return undefined;
    const stored = await this.call('secret', (c) => c.getBuffer(secretKey));
    const secret = stored ? decodeValue(stored, this.#parts.keyring) : undefined;
    if (secret?.length === 32) return Buffer.from(secret);
    if (stored) this.failures.record('secret', new Error(`stored secret "${name}" does not open with this keyring`));
    return undefined;
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#listeners.clear();
    this.subscriber?.disconnect();
    this.client.disconnect();
  }

  /** Runs one Redis operation under the tier rule: any failure is counted and becomes undefined. */
  protected async call<T>(kind: string, operation: (client: RedisClient) => Promise<T>): Promise<T | undefined> {
    if (!this.healthy()) return this.recordUnavailable(kind);
    try {
      return await operation(this.client);
    } catch (error) {
      this.failures.record(kind, error);
      return undefined;
    }
  }

  /** Counts a call skipped because there is no usable connection (down, reconnecting, closed). */
  protected recordUnavailable(kind: string): undefined {
    this.failures.record(kind, new Error(this.#closed ? 'tier closed' : `redis not ready (${this.client.status})`));
    return undefined;
  }

  protected scripts(client: RedisClient): ScriptCommands {
    return client as unknown as ScriptCommands;
  }

  protected entryKey(key: string): string {
    return `${this.#parts.prefix}{${key}}`;
  }

  protected lockKey(key: string): string {
    return `${this.#parts.prefix}{${key}}:lock`;
  }

  protected tagKey(tag: string): string {
    return `${this.#parts.prefix}tag:${tag}`;
  }

  protected jsonKey(namespace: string, key: string): string {
    return `${this.#parts.prefix}json:${namespace}:${key}`;
  }

  #subscribe(): RedisClient {
    const subscriber = this.#parts.makeSubscriber();
    watchConnection(subscriber, 'subscriber', this.failures, this.#parts.logger, () => this.#closed);
    let lost = false;
    subscriber.on('close', () => {
      lost ||= this.#subscribed;
      this.#subscribed = false;
    });
    subscriber.on('ready', () => {
      // 'ready' comes before ioredis re-subscribes, so subscribe (idempotent) and count as
      // listening only once Redis confirmed it. Invalidations published while we were away are
      // gone (pub/sub keeps nothing): tell listeners to forget everything rather than serve
      // what may have been invalidated.
      subscriber.subscribe(this.#channel).then(
        () => {
          this.#subscribed = true;
          if (lost) this.#emit({ kind: 'all' });
          lost = false;
        },
        (error: unknown) => this.failures.record('subscribe', error),
      );
    });
    subscriber.on('message', (channel: string, payload: string) => this.#receive(channel, payload));
    return subscriber;
  }

  #receive(channel: string, payload: string): void {
    if (channel !== this.#channel) return;
    try {
      const message = JSON.parse(payload) as InvalidationMessage & { origin?: string };
      if (message.origin === this.#parts.origin) return;
      if (message.kind === 'tag' || message.kind === 'key' || message.kind === 'all') this.#emit(message);
    } catch (error) {
      this.failures.record('subscribe', error);
    }
  }

  #emit(message: InvalidationMessage): void {
    for (const listener of this.#listeners) {
      try {
        listener(message);
      } catch (error) {
        this.failures.record('listener', error);
      }
    }
  }
}

/** Connection-level events: losses and errors are counted and logged (rate-limited), recoveries logged. */
function watchConnection(client: RedisClient, kind: string, failures: FailureLog, logger: TierLogger, isClosed: () => boolean): void {
  let up = false;
  let down = false;
  client.on('error', (error: unknown) => {
    down = true;
    failures.record(kind, error);
  });
  // A killed server closes the socket without any 'error' until the first reconnect fails.
  client.on('close', () => {
    if (up && !isClosed()) failures.record(kind, new Error('connection lost'));
    down ||= up;
    up = false;
  });
  client.on('ready', () => {
    if (down) logger.info({ kind }, 'redis connection restored');
    up = true;
    down = false;
  });
}
