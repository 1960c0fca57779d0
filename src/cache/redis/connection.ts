/**
 * The one Redis connection every Redis role shares (redis.ts builds them): the command client,
 * the subscriber (opened on first use: a connection in subscribe mode can send nothing else),
 * the key layout, the keyring values are sealed with, and the failure rules.
 *
 * The failure rule, for every role: an error, a timeout or a disconnection is counted and
 * logged (rate-limited, failure-log.ts) and answered as "nothing there" — `call` never
 * rejects, and no call waits longer than the command timeout (redis-client.ts). A timeout
 * spends the request's budget (budget.ts: nothing more is sent for that request), and repeated
 * ones open the circuit breaker (breaker.ts: nothing is sent by anyone for a cool-down).
 *
 * The trust rule: every value read back is bound to the key it was read from (codec.ts: GCM
 * associated data, or an HMAC under a key derived from the configured identity HMAC secret).
 * Until `bind(secret)`, nothing is read or written; a value that does not belong under its key is
 * a miss, counted and logged (`refuse`), never deleted: it may be another replica's, written under
 * another secret during a rollout, and its writer's TTL (or the next fill's SET) replaces it.
 *
 * Key layout (prefix `tmc:`): `tmc:{<key>}` entry, `tmc:{<key>}:lock` its fill lock (the hash
 * tag puts both in one cluster slot, so one script can read both), `tmc:tag:<tag>` the set of
 * entry keys carrying a tag, `tmc:derive:<name>` the pages that can derive an answer (derive-sets.ts), `tmc:json:<ns>:<key>` shared values, `tmc:budget:<name>` the fleet's
 * upstream budget (a hash), `tmc:invalidate` the invalidation channel.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Cluster, ReplyError, type Redis } from 'ioredis';
import { DEFAULT_BREAKER_COOLDOWN_MS, DEFAULT_BREAKER_THRESHOLD, DEFAULT_KEY_PREFIX } from '../../config/schema.js';
import { CircuitBreaker, redisFailureInWords } from './breaker.js';
import type { SharedTierBudget } from '../budget.js';
import { deriveMacKey, type Decoded, type ValueGuard } from './codec.js';
import { FailureLog, silentLogger, type FailureCounts, type TierLogger } from './failure-log.js';
import { describeRedisKey } from '../key.js';
import { assertKeyring, type Keyring } from './keyring.js';
import { createRedisClient, type RedisClient, type RedisConnectionOptions } from './client.js';
import { tracing } from '../../trace/tracing.js';

export interface RedisConnectionSettings extends RedisConnectionOptions {
  /** Prepended to every key and to the invalidation channel; default `tmc:`. */
  keyPrefix?: string;
  /** Seals every stored value (AES-256-GCM); without it values are compressed, not encrypted. */
  keyring?: Keyring;
  logger?: TierLogger;
  /** At most one log line per failure kind per this interval. */
  logIntervalMs?: number;
  /** Consecutive timeouts/errors that open the circuit breaker; default 3. */
  breakerThreshold?: number;
  /** How long the open breaker skips Redis before a probe (ms); default 1000. */
  breakerCooldownMs?: number;
  /** Each operation sent, by kind, with its duration in seconds, answered or failed (metrics). */
  onCommand?: (kind: string, seconds: number) => void;
}

export interface RedisFailureStats extends FailureCounts {
  /** Alias of `total`: every error, timeout, disconnection or undecodable value, of every role. */
  errors: number;
  /** Commands not sent because the circuit breaker was open. */
  skipped: number;
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
const WAIT_FIRST_POLL_MS = 5;
const WAIT_MAX_POLL_MS = 50;

/** A lock's holder token (only it releases the lock) and its PX for `ttlMs` (at least 1 ms). */
export function newLock(ttlMs: number): { token: string; px: number } {
  return { token: randomBytes(16).toString('base64url'), px: Math.max(1, Math.ceil(ttlMs)) };
}

/** What a poll of `whileLocked` answers while the lock is still held: poll again. */
export const STILL_LOCKED = Symbol('still locked');

const LOCK_SCRIPTS = {
  // Deletes a lock only if it still holds our token: an expired lock taken over by another
  // replica must not be released by us.
  tmcUnlock: {
    numberOfKeys: 1,
    lua: `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`,
  },
  // Renews a lock's expiry only if it still holds our token (a holder still at work).
  tmcExtendLock: {
    numberOfKeys: 1,
    lua: `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0`,
  },
};

interface LockCommands {
  tmcUnlock(lockKey: string, token: string): Promise<number>;
  tmcExtendLock(lockKey: string, token: string, px: number): Promise<number>;
}

export class RedisConnection {
  readonly keyPrefix: string;
  readonly keyring: Keyring | undefined;
  readonly mode: 'cluster' | 'single';
  readonly failures: FailureLog;
  readonly #client: RedisClient;
  readonly #settings: RedisConnectionSettings;
  readonly #logger: TierLogger;
  readonly #breaker: CircuitBreaker;
  readonly #onCommand: ((kind: string, seconds: number) => void) | undefined;
  /** How values are bound to their keys; undefined until `bind()`. */
  #guard: ValueGuard | undefined;
  #subscriber: RedisClient | undefined;
  #subscribed = false;
  #closed = false;
  /** The breaker's next probe, while it is open (`#probeLater`). */
  #probeTimer: NodeJS.Timeout | undefined;

  constructor(settings: RedisConnectionSettings) {
    if (settings.keyring) assertKeyring(settings.keyring);
    this.#settings = settings;
    this.#client = createRedisClient(settings, 'commands');
    this.keyPrefix = settings.keyPrefix ?? DEFAULT_KEY_PREFIX;
    this.keyring = settings.keyring;
    this.mode = this.#client instanceof Cluster ? 'cluster' : 'single';
    this.#logger = settings.logger ?? silentLogger;
    this.failures = new FailureLog(this.#logger, settings.logIntervalMs);
    this.#breaker = new CircuitBreaker({
      threshold: settings.breakerThreshold ?? DEFAULT_BREAKER_THRESHOLD,
      cooldownMs: settings.breakerCooldownMs ?? DEFAULT_BREAKER_COOLDOWN_MS,
    });
    this.#onCommand = settings.onCommand;
    this.defineScripts(LOCK_SCRIPTS);
    watchConnection(this.#client, 'connection', this.failures, this.#logger, () => this.#closed);
  }

  /** Connections to each master (a cluster's), or the one server: where a SCAN must run. */
  masters(): Redis[] {
    return this.#client instanceof Cluster ? this.#client.nodes('master') : [this.#client as Redis];
  }

  entryKey(key: string): string {
    return `${this.keyPrefix}{${key}}`;
  }

  /** The lock of `key`'s fill; an `owner`'s lock of it beside the key's own (the same hash tag: one slot with the entry). */
  lockKey(key: string, owner?: string): string {
    return owner === undefined ? `${this.keyPrefix}{${key}}:lock` : `${this.keyPrefix}{${key}}:${owner}:lock`;
  }

  tagKey(tag: string): string {
    return `${this.keyPrefix}tag:${tag}`;
  }

  jsonKey(namespace: string, key: string): string {
    return `${this.keyPrefix}json:${namespace}:${key}`;
  }

  budgetKey(name: string): string {
    return `${this.keyPrefix}budget:${name}`;
  }

  /** True while commands can be sent; for readiness reporting. */
  healthy(): boolean {
    return !this.#closed && this.#client.status === 'ready';
  }

  /** Worth encoding a value for: connected, and the breaker closed. */
  canSend(): boolean {
    return this.healthy() && this.#breaker.openReason() === undefined;
  }

  /**
   * Why Redis is not used now (disconnected, or the breaker open), in words for /readyz (the
   * client's own message is in the log); undefined when it is.
   */
  degradedReason(): string | undefined {
    if (!this.healthy()) {
      // Why it is not connected (a refused password, an unverified certificate), when known.
      const { lastError } = this.failures.counts();
      const why = lastError ? ` (${redisFailureInWords(lastError.message)})` : '';
      return `Redis ${connectionInWords(this.#closed ? 'end' : this.#client.status)}${why}: serving from memory and upstream`;
    }
    const open = this.#breaker.openReason();
    return open === undefined ? undefined : `Redis ${open}: serving from memory and upstream`;
  }

  /**
   * Binds every value to its key from now on: the MAC key is derived from the identity HMAC
   * secret (RFC 5869 HKDF), which is configured, never kept in Redis. The server calls this
   * before it serves any request.
   */
  bind(secret: Buffer): void {
    this.#guard = { keyring: this.keyring, macKey: deriveMacKey(secret) };
  }

  /** The guard values are bound with, or undefined (counted) before `bind()`: nothing is read or written. */
  guardFor(kind: string): ValueGuard | undefined {
    if (this.#guard === undefined) this.failures.record(kind, new Error('values are not bound yet (bind() not called)'));
    return this.#guard;
  }

  /**
   * A value read back from `redisKey` that is not what was written there: a miss, counted and
   * logged (the key as `describeRedisKey` shows it: never a user id or a query). Never deleted:
   * a value that does not verify under this replica's secret may be another replica's, and
   * deleting it would let replicas with different secrets erase each other's work (or let
   * anyone who can plant a value make every replica delete on its behalf). Redis expires it by
   * its TTL, and this replica's own fill overwrites it.
   */
  refuse(redisKey: string, decoded: Exclude<Decoded<unknown>, { kind: 'ok' }>): undefined {
    const key = describeRedisKey(redisKey, this.keyPrefix);
    if (decoded.kind === 'foreign') {
      this.failures.record('decode', new Error('stored value of another version, key id or protection'), key);
      return undefined;
    }
    this.failures.record(decoded.reason, new Error(`stored value does not belong under its key (${decoded.detail})`), key);
    return undefined;
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
    return { ...counts, errors: counts.total, skipped: this.#breaker.skipped };
  }

  /**
   * A cross-replica lock (the fill lock's, the shared store's): SET NX PX, answering a token if
   * this replica took it, undefined if another holds it or Redis cannot answer. It expires by
   * itself, so a replica that dies holding it delays the others by at most `ttlMs`.
   */
  async tryLock(lockKey: string, ttlMs: number, budget?: SharedTierBudget): Promise<string | undefined> {
    const { token, px } = newLock(ttlMs);
    const result = await this.call('lock', (c) => c.set(lockKey, token, 'PX', px, 'NX'), budget);
    return result === 'OK' ? token : undefined;
  }

  /** Releases a lock only if it still holds `token`. */
  async unlock(lockKey: string, token: string): Promise<void> {
    await this.call('lock', (c) => (c as unknown as LockCommands).tmcUnlock(lockKey, token));
  }

  /**
   * Keeps a lock this replica holds for another `ttlMs` (a holder still at work: waiting for a
   * budget token, or for the instance); false once it is not ours any more, or Redis cannot answer.
   */
  async extendLock(lockKey: string, token: string, ttlMs: number): Promise<boolean> {
    const px = Math.max(1, Math.ceil(ttlMs));
    return (await this.call('lock', (c) => (c as unknown as LockCommands).tmcExtendLock(lockKey, token, px))) === 1;
  }

  /**
   * Waits for what another replica produces under its lock: `poll` answers STILL_LOCKED (poll
   * again, 5 ms doubling to 50 ms) or the outcome; undefined at `timeoutMs`.
   *
   * Polling rather than a pub/sub notice: a notice would need a subscription per waited key or
   * a broadcast of every fill to every replica (in a cluster, to every node), and a lost message
   * would leave waiters to the timeout. The work waited for takes an upstream round trip (tens to
   * hundreds of ms), so a poll adds at most its interval, and waiting is rare: within a replica,
   * that work is already coalesced.
   */
  async whileLocked<T>(timeoutMs: number, poll: () => Promise<T | typeof STILL_LOCKED>): Promise<T | undefined> {
    const deadline = performance.now() + timeoutMs;
    for (let delayMs = WAIT_FIRST_POLL_MS; ; delayMs = Math.min(delayMs * 2, WAIT_MAX_POLL_MS)) {
      const polled = await poll();
      if (polled !== STILL_LOCKED) return polled;
      const remainingMs = deadline - performance.now();
      if (remainingMs <= 0) return undefined;
      await sleep(Math.min(delayMs, remainingMs));
    }
  }

  /** Registers scripts as client commands (a role's, once, at construction). */
  defineScripts(scripts: Record<string, RedisScript>): void {
    for (const [name, script] of Object.entries(scripts)) this.#client.defineCommand(name, script);
  }

  /**
   * Runs one Redis operation under the failure rule: any failure is counted and becomes
   * undefined. Nothing is sent once `budget` is spent or while the breaker is open. A timeout or
   * connection error spends the budget and counts towards the breaker; a reply error is an
   * answer (Redis is there), so it does neither.
   */
  async call<T>(kind: string, operation: (client: RedisClient) => Promise<T>, budget?: SharedTierBudget): Promise<T | undefined> {
    if (budget?.sharedTierSpent) return undefined;
    if (!this.healthy()) return this.recordUnavailable(kind);
    if (!this.#breaker.allows()) return undefined;
    const started = performance.now();
    // Traced (a request's round trip, tracing on): a span per call, named by its role's word.
    const span = tracing?.child(`redis ${kind}`, 'client', { 'db.system.name': 'redis', 'db.operation.name': kind });
    try {
      const result = await operation(this.#client);
      this.#onCommand?.(kind, (performance.now() - started) / 1_000);
      if (span !== undefined) tracing?.end(span);
      this.#breaker.succeeded();
      return result;
    } catch (error) {
      this.#onCommand?.(kind, (performance.now() - started) / 1_000);
      if (span !== undefined) tracing?.end(span, error);
      this.failures.record(kind, error);
      if (error instanceof ReplyError) {
        this.#breaker.succeeded();
      } else {
        this.#breaker.failed(error instanceof Error ? error.message : String(error));
        if (budget) budget.sharedTierSpent = true;
        this.#probeLater();
      }
      return undefined;
    }
  }

  /**
   * An open breaker is probed by a timer, not only by the next request's command: an idle
   * replica would otherwise report Redis degraded (readiness, `tm_cache_redis_up`) long after it
   * came back. One timer at a time, unref'd: it never keeps the process alive.
   */
  #probeLater(): void {
    const waitMs = this.#breaker.msUntilProbe();
    if (waitMs === undefined || this.#probeTimer !== undefined || this.#closed) return;
    this.#probeTimer = setTimeout(() => {
      this.#probeTimer = undefined;
      this.#probe();
    }, waitMs + 1);
    this.#probeTimer.unref();
  }

  /** One PING through the breaker: its answer closes it; its failure reopens it (and arms the timer again, `call`). */
  #probe(): void {
    const waitMs = this.#breaker.msUntilProbe();
    if (waitMs === undefined || this.#closed) return;
    // Disconnected: ioredis reconnects by itself; the breaker is probed once it is back.
    if (!this.healthy() || waitMs > 0) {
      this.#probeTimer = setTimeout(
        () => {
          this.#probeTimer = undefined;
          this.#probe();
        },
        Math.max(waitMs, this.#settings.breakerCooldownMs ?? DEFAULT_BREAKER_COOLDOWN_MS),
      );
      this.#probeTimer.unref();
      return;
    }
    void this.call('probe', (c) => c.ping());
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
    clearTimeout(this.#probeTimer);
    this.#subscriber?.disconnect();
    this.#client.disconnect();
  }

  #openSubscriber(): RedisClient {
    const subscriber = createRedisClient(this.#settings, 'subscriber');
    watchConnection(subscriber, 'subscriber', this.failures, this.#logger, () => this.#closed);
    return subscriber;
  }
}

/** ioredis' connection status as /readyz says it. */
function connectionInWords(status: string): string {
  switch (status) {
    case 'wait':
    case 'connecting':
    case 'connect':
      return 'is not connected yet';
    case 'reconnecting':
      return 'connection lost, reconnecting';
    case 'close':
    case 'end':
      return 'connection closed';
    default:
      return `not ready (${status})`;
  }
}

/** Connection-level events: losses and errors are counted and logged (rate-limited), recoveries logged. */
function watchConnection(client: RedisClient, kind: string, failures: FailureLog, logger: TierLogger, isClosed: () => boolean): void {
  let up = false;
  let down = false;
  client.on('error', (error: unknown) => {
    down = true;
    failures.record(kind, withCause(error));
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

/**
 * A Cluster that cannot reach any node says only "Failed to refresh slots cache."; the reason an
 * operator needs (WRONGPASS, a refused certificate, ECONNREFUSED) is the last node's error.
 */
function withCause(error: unknown): unknown {
  const cause = (error as { lastNodeError?: unknown } | null)?.lastNodeError;
  return error instanceof Error && cause instanceof Error ? new Error(`${error.message} (last node: ${cause.message})`) : error;
}
