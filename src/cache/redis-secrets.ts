/**
 * Secrets every replica must agree on (the HMAC secret for credentials), created once by
 * whichever replica asks first and sealed at rest with the connection's keyring.
 *
 * The secret is the root of trust: the MAC key binding every other value to its key is derived
 * from it, so it cannot be MAC'd by itself. With a keyring it is sealed and bound to its key;
 * without one, anyone who can write Redis can replace it before the first replica starts: where
 * Redis is shared with anyone untrusted, configure `identity.hmacSecret` explicitly.
 *
 * Invariant: a stored secret is never overwritten, not even one this replica cannot open (a
 * replica with the wrong keyring gets `undefined` and decides for itself, rather than change
 * the secret under every other replica).
 */
import { randomBytes } from 'node:crypto';
import { encodeValue, openValue } from './codec.js';
import type { RedisConnection } from './redis-connection.js';

const SECRET_BYTES = 32;

export class RedisSecrets {
  readonly #connection: RedisConnection;

  constructor(connection: RedisConnection) {
    this.#connection = connection;
  }

  /**
   * The 32-byte secret every replica shares under `name`: the first replica to ask creates it
   * (SET NX), the others read the winner's. Undefined when Redis cannot answer or the stored
   * value does not open with this keyring; the caller decides what to do then.
   */
  async getOrCreateSecret(name: string): Promise<Buffer | undefined> {
    const connection = this.#connection;
    const secretKey = connection.secretKey(name);
    const candidate = randomBytes(SECRET_BYTES);
    const guard = connection.rootGuard;
    const created = await connection.call('secret', (c) => c.set(secretKey, encodeValue(candidate, guard, secretKey), 'NX'));
    if (created === 'OK') return candidate;
    if (created === undefined) return undefined;
    const stored = await connection.call('secret', (c) => c.getBuffer(secretKey));
    const opened = stored ? openValue(stored, guard, secretKey) : undefined;
    const secret = opened?.kind === 'ok' ? opened.value : undefined;
    if (secret?.length === SECRET_BYTES) return Buffer.from(secret);
    if (stored) connection.failures.record('secret', new Error(`stored secret "${name}" does not open with this keyring`));
    return undefined;
  }
}
