/**
 * The one Redis connection every Redis role shares (redis.ts builds them): the command client,
 * the subscriber (opened on first use: a connection in subscribe mode can send nothing else),
 * the key layout, the keyring values are sealed with, and the failure rules.
 *
 * The failure rule, for every role: an error, a timeout or a disconnection is counted and
 * logged (rate-limited, failure-log.ts) and answered as "nothing there" — `call` never
 * rejects, and no call waits longer than the command timeout (redis-client.ts).
 *
 * Key layout (prefix `tmc:`): `tmc:{<key>}` entry, `tmc:{<key>}:lock` its fill lock (the hash
 * tag puts both in one cluster slot, so one script can read both), `tmc:tag:<tag>` the set of
 * entry keys carrying a tag, `tmc:json:<ns>:<key>` shared values, `tmc:secret:<name>` secrets,
 * `tmc:invalidate` the invalidation channel.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { Cluster } from 'ioredis';
import { DEFAULT_KEY_PREFIX } from '../config/schema.js';
import { FailureLog, silentLogger, type FailureCounts, type TierLogger } from './failure-log.js';
import { assertKeyring, type Keyring } from './keyring.js';
import { createRedisClient, type RedisClient, type RedisConnectionOptions } from './redis-client.js';

export interface RedisConnectionSettings extends RedisConnectionOptions {
  /** Prepended to every key and to the invalidation channel; default `tmc:`. */
  keyPrefix?: string;
  /** Seals every stored value (AES-256-GCM); without it values are compressed, not encrypted. */
  keyring?: Keyring;
  logger?: TierLogger;
  /** At most one log line per failure kind per this interval. */
  logIntervalMs?: number;
}

export interface RedisFailureStats extends FailureCounts {
  /** Alias of `total`: every error, timeout, disconnection or undecodable value, of every role. */
  errors: number;
}

export interface RedisConnectionStatus {
  healthy: boolean;
  /** ioredis connection state: connecting, ready, reconnecting, end, ... */
  connection: string;
  subscriber?: string;
  lastError?: FailureCounts['lastError'];
}

/** A Lua script for ioredis `defineCommand`: each check-and-act runs atomically on the server. */
export interface RedisScript {
  numberOfKeys: number;
  lua: string;
}

/** What the subscriber tells its user: a message, or that messages may have been lost meanwhile. */
export interface ChannelHandlers {
  message(payload: string): void;
  resubscribedAfterLoss(): void;
}

const READY_POLL_MS = 20;

export class RedisConnection {
  readonly keyPrefix: string;
  readonly keyring: Keyring | undefined;
  readonly mode: 'cluster' | 'single';
  readonly failures: FailureLog;
  readonly #client: RedisClient;
  readonly #settings: RedisConnectionSettings;
  readonly #logger: TierLogger;
  #subscriber: RedisClient | undefined;
  #subscribed = false;
  #closed = false;

  constructor(settings: RedisConnectionSettings) {
    if (settings.keyring) assertKeyring(settings.keyring);
    this.#settings = settings;
    this.#client = createRedisClient(settings, 'commands');
    this.keyPrefix = settings.keyPrefix ?? DEFAULT_KEY_PREFIX;
    this.keyring = settings.keyring;
    this.mode = this.#client instanceof Cluster ? 'cluster' : 'single';
    this.#logger = settings.logger ?? silentLogger;
    this.failures = new FailureLog(this.#logger, settings.logIntervalMs);
    watchConnection(this.#client, 'connection', this.failures, this.#logger, () => this.#closed);
  }

  entryKey(key: string): string {
    return `${this.keyPrefix}{${key}}`;
  }

  lockKey(key: string): string {
    return `${this.keyPrefix}{${key}}:lock`;
  }

  tagKey(tag: string): string {
    return `${this.keyPrefix}tag:${tag}`;
  }

  jsonKey(namespace: string, key: string): string {
    return `${this.keyPrefix}json:${namespace}:${key}`;
  }

  secretKey(name: string): string {
    return `${this.keyPrefix}secret:${name}`;
  }

  /** True while commands can be sent; for readiness reporting. */
  healthy(): boolean {
    return !this.#closed && this.#client.status === 'ready';
  }

  /** Waits (bounded) until connected and, if subscribed, listening. False at the timeout. */
  async ready(timeoutMs: number): Promise<boolean> {
    const deadline = performance.now() + timeoutMs;
    while (!(this.healthy() && (this.#subscriber === undefined || this.#subscribed))) {
      if (this.#closed || performance.now() >= deadline) return false;
      await sleep(READY_POLL_MS);
    }
    return true;
  }

  status(): RedisConnectionStatus {
    const status: RedisConnectionStatus = { healthy: this.healthy(), connection: this.#client.status };
    if (this.#subscriber) status.subscriber = this.#subscriber.status;
    const { lastError } = this.failures.counts();
    if (lastError) status.lastError = lastError;
    return status;
  }

  stats(): RedisFailureStats {
    const counts = this.failures.counts();
    return { ...counts, errors: counts.total };
  }

  /** Registers scripts as client commands (a role's, once, at construction). */
  defineScripts(scripts: Record<string, RedisScript>): void {
    for (const [name, script] of Object.entries(scripts)) this.#client.defineCommand(name, script);
  }

  /** Runs one Redis operation under the failure rule: any failure is counted and becomes undefined. */
  async call<T>(kind: string, operation: (client: RedisClient) => Promise<T>): Promise<T | undefined> {
    if (!this.healthy()) return this.recordUnavailable(kind);
    try {
      return await operation(this.#client);
    } catch (error) {
      this.failures.record(kind, error);
      return undefined;
    }
  }

  /** Counts a call skipped because there is no usable connection (down, reconnecting, closed). */
  recordUnavailable(kind: string): undefined {
    this.failures.record(kind, new Error(this.#closed ? 'connection closed' : `redis not ready (${this.#client.status})`));
    return undefined;
  }

  /**
   * Listens on `channel` through the subscriber connection, opened now if it is not yet. After
   * a reconnect, ioredis re-subscribes by itself; the handlers hear that messages were lost.
   */
  subscribe(channel: string, handlers: ChannelHandlers): void {
    if (this.#closed) return;
    const subscriber = (this.#subscriber ??= this.#openSubscriber());
    let lost = false;
    subscriber.on('close', () => {
      lost ||= this.#subscribed;
      this.#subscribed = false;
    });
    // 'ready' comes before ioredis re-subscribes, so subscribe (idempotent) and count as
    // listening only once Redis confirmed it.
    const listen = (): void => {
      subscriber.subscribe(channel).then(
        () => {
          this.#subscribed = true;
          if (lost) handlers.resubscribedAfterLoss();
          lost = false;
        },
        (error: unknown) => this.failures.record('subscribe', error),
      );
    };
    subscriber.on('ready', listen);
    if (subscriber.status === 'ready') listen();
    subscriber.on('message', (from: string, payload: string) => {
      if (from === channel) handlers.message(payload);
    });
  }

  /** Disconnects both connections at once; calls from then on are counted as unavailable. */
  close(): void {
    this.#closed = true;
    this.#subscriber?.disconnect();
    this.#client.disconnect();
  }

  #openSubscriber(): RedisClient {
    const subscriber = createRedisClient(this.#settings, 'subscriber');
    watchConnection(subscriber, 'subscriber', this.failures, this.#logger, () => this.#closed);
    return subscriber;
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
