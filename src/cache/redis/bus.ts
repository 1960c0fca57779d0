/**
 * The invalidation bus over Redis pub/sub: one channel (`<prefix>invalidate`), one JSON
 * message per invalidation, stamped with this replica's origin so it ignores its own echo.
 *
 * Pub/sub keeps nothing for later: after the subscriber lost its connection, listeners get
 * `{ kind: 'all', missed: true }` once it listens again (invalidation.ts).
 */
import { randomUUID } from 'node:crypto';
import type { InvalidationBus, InvalidationListener, InvalidationMessage } from '../invalidation.js';
import type { RedisConnection } from './connection.js';

export class RedisInvalidationBus implements InvalidationBus {
  /** This replica's id, sent with each message so it can ignore its own. */
  readonly origin: string;
  readonly #connection: RedisConnection;
  readonly #channel: string;
  readonly #listeners = new Set<InvalidationListener>();
  #subscribed = false;

  constructor(connection: RedisConnection, origin: string = randomUUID()) {
    this.#connection = connection;
    this.#channel = `${connection.keyPrefix}invalidate`;
    this.origin = origin;
  }

  /** Sends to every replica listening now; never rejects; false when Redis did not take it. */
  async publish(message: InvalidationMessage): Promise<boolean> {
    const payload = JSON.stringify({ ...message, origin: this.origin });
    return (await this.#connection.call('publish', (c) => c.publish(this.#channel, payload))) !== undefined;
  }

  /** The first listener opens the subscription (and with it the subscriber connection). */
  onInvalidate(listener: InvalidationListener): () => void {
    this.#listeners.add(listener);
    if (!this.#subscribed) {
      this.#subscribed = true;
      this.#connection.subscribe(this.#channel, {
        message: (payload) => this.#receive(payload),
        resubscribedAfterLoss: () => this.#emit({ kind: 'all', missed: true }),
      });
    }
    return () => void this.#listeners.delete(listener);
  }

  /** The connection's readiness: connected and, once anyone listens, subscribed. */
  ready(timeoutMs: number): Promise<boolean> {
    return this.#connection.ready(timeoutMs);
  }

  #receive(payload: string): void {
    try {
      const message = JSON.parse(payload) as InvalidationMessage & { origin?: string };
      if (message.origin === this.origin) return;
      // `missed` is this bus's own word, never another replica's.
      if (message.kind === 'all') this.#emit({ kind: 'all' });
      else if (message.kind === 'tag' || message.kind === 'key' || message.kind === 'forget' || isAccessRefused(message)) this.#emit(message);
    } catch (error) {
      this.#connection.failures.record('subscribe', error);
    }
  }

  #emit(message: InvalidationMessage): void {
    for (const listener of this.#listeners) {
      try {
        listener(message);
      } catch (error) {
        this.#connection.failures.record('listener', error);
      }
    }
  }
}

/** A well-formed `access-refused` (invalidation.ts): what a listener may act on without checking again. */
function isAccessRefused(message: InvalidationMessage): boolean {
  if (message.kind !== 'access-refused') return false;
  return Number.isSafeInteger(message.userId) && Number.isSafeInteger(message.projectId) && Number.isFinite(message.at);
}
