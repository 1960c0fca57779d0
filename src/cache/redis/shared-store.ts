/**
 * Small JSON values every replica shares (identities and access decisions: the `SharedStore`
 * of src/proxy/callers/identity.ts), bound to their Redis key like every value in Redis (codec.ts).
 *
 * Invariants: keys must already be HMACs, never raw credentials; a value that cannot be read
 * (Redis down, another keyring, corrupt JSON) is `undefined`, counted, never thrown; so is one
 * that was not written under its key, or that the reader's `isValid` refuses (never deleted:
 * RedisConnection.refuse says why).
 *
 * It also lends the lock role (shared-fill.ts) over a namespace (`lockFor`): the first replica
 * to look up a credential asks upstream, the others wait for the identity it shares, as the fill
 * lock does for entries (redis-fill-lock.ts). A lock expires by itself; when Redis cannot
 * answer, nobody holds one and nobody waits.
 */
import type { SharedTierBudget } from '../budget.js';
import { encodeValue, openValue } from './codec.js';
import { STILL_LOCKED, type RedisConnection } from './connection.js';
import type { SharedLock } from '../shared-fill.js';

/** What a reader adds to a lookup: its request's budget, and the shape it accepts. */
export interface SharedReadOptions {
  readonly budget?: SharedTierBudget | undefined;
  readonly isValid?: ((value: unknown) => boolean) | undefined;
}

export class RedisSharedStore {
  readonly #connection: RedisConnection;

  constructor(connection: RedisConnection) {
    this.#connection = connection;
  }

  /**
   * The lock role over one namespace's values: `claim` is SET NX PX and never answers a stored
   * value (its readers looked with `getJson` just before); `waitFor` answers the value another
   * replica produces under its lock once it is there (read as `getJson` reads it, `isValid`
   * included), undefined once the lock is gone without one (the other replica was refused, or
   * died), at the timeout, or at once if Redis cannot answer.
   */
  lockFor<T>(namespace: string, isValid?: (value: unknown) => boolean): SharedLock<T> {
    const connection = this.#connection;
    const lockKey = (key: string): string => connection.jsonKey(`${namespace}-lock`, key);
    return {
      claim: async (key, ttlMs, _acceptStored, budget) => {
        const token = await connection.tryLock(lockKey(key), ttlMs, budget);
        return token === undefined ? undefined : { token };
      },
      unlock: (key, token) => connection.unlock(lockKey(key), token),
      extend: (key, token, ttlMs) => connection.extendLock(lockKey(key), token, ttlMs),
      waitFor: (key, timeoutMs, budget) => {
        const [held, read] = [lockKey(key), { budget, isValid }];
        return connection.whileLocked(timeoutMs, async () => {
          const locked = await connection.call('lock', (c) => c.exists(held), budget);
          const value = await this.getJson<T>(namespace, key, read);
          return value === undefined && locked === 1 ? STILL_LOCKED : value;
        });
      },
    };
  }

  async getJson<T>(namespace: string, key: string, options: SharedReadOptions = {}): Promise<T | undefined> {
    const connection = this.#connection;
    const guard = connection.guardFor('json');
    if (!guard) return undefined;
    const jsonKey = connection.jsonKey(namespace, key);
    const stored = await connection.call('json', (c) => c.getBuffer(jsonKey), options.budget);
    if (!stored) return undefined;
    const opened = openValue(stored, guard, jsonKey);
    if (opened.kind !== 'ok') return connection.refuse(jsonKey, opened);
    let value: unknown;
    try {
      value = JSON.parse(opened.value.toString('utf8'));
    } catch {
      return connection.refuse(jsonKey, { kind: 'rejected', reason: 'invalid', detail: 'JSON' });
    }
    if (options.isValid && !options.isValid(value)) return connection.refuse(jsonKey, { kind: 'rejected', reason: 'invalid', detail: namespace });
    return value as T;
  }

  /** Stores `value` for `ttlMs`; never rejects; sends nothing once `budget` is spent. */
  setJson(namespace: string, key: string, value: unknown, ttlMs: number, budget?: SharedTierBudget): Promise<void> {
    return this.setJsonMany(namespace, [[key, value]], ttlMs, budget);
  }

  /**
   * Stores several values of one namespace for `ttlMs` as one call: sent together, it costs at
   * most one timeout (and one failure towards the breaker) however many there are. Separate SETs,
   * not a pipeline: in a cluster the keys live on different nodes. Never rejects; sends nothing
   * once `budget` is spent.
   */
  async setJsonMany(namespace: string, values: readonly (readonly [key: string, value: unknown])[], ttlMs: number, budget?: SharedTierBudget): Promise<void> {
    const connection = this.#connection;
    if (!(ttlMs > 0) || values.length === 0) return;
    // Checked before sealing: no point encrypting for a connection that is down.
    if (!connection.healthy()) return connection.recordUnavailable('json');
    const guard = connection.guardFor('json');
    if (!guard || !connection.canSend() || budget?.sharedTierSpent) return;
    const px = Math.ceil(ttlMs);
    const sealed = values.map(([key, value]) => {
      const jsonKey = connection.jsonKey(namespace, key);
      return [jsonKey, encodeValue(Buffer.from(JSON.stringify(value)), guard, jsonKey)] as const;
    });
    await connection.call('json', (c) => Promise.all(sealed.map(([jsonKey, stored]) => c.set(jsonKey, stored, 'PX', px))), budget);
  }
}
