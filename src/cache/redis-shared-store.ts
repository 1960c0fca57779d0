/**
 * Small JSON values every replica shares (identities and access decisions: the `SharedStore`
 * of src/proxy/identity.ts), sealed with the connection's keyring like every value in Redis.
 *
 * Invariants: keys must already be HMACs, never raw credentials; a value that cannot be read
 * (Redis down, another keyring, corrupt JSON) is `undefined`, counted, never thrown.
 */
import { decodeValue, encodeValue } from './codec.js';
import type { RedisConnection } from './redis-connection.js';

export class RedisSharedStore {
  readonly #connection: RedisConnection;

  constructor(connection: RedisConnection) {
    this.#connection = connection;
  }

  async getJson<T>(namespace: string, key: string): Promise<T | undefined> {
    const connection = this.#connection;
    const stored = await connection.call('json', (c) => c.getBuffer(connection.jsonKey(namespace, key)));
    const plain = stored ? decodeValue(stored, connection.keyring) : undefined;
    if (!plain) return undefined;
    try {
      return JSON.parse(plain.toString('utf8')) as T;
    } catch (error) {
      connection.failures.record('decode', error, { namespace });
      return undefined;
    }
  }

  /** Stores `value` for `ttlMs`; never rejects. */
  async setJson(namespace: string, key: string, value: unknown, ttlMs: number): Promise<void> {
    const connection = this.#connection;
    if (!(ttlMs > 0)) return;
    // Checked before sealing: no point encrypting for a connection that is down.
    if (!connection.healthy()) return connection.recordUnavailable('json');
    const stored = encodeValue(Buffer.from(JSON.stringify(value)), connection.keyring);
    await connection.call('json', (c) => c.set(connection.jsonKey(namespace, key), stored, 'PX', Math.ceil(ttlMs)));
  }
}
