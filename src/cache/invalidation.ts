/**
 * How replicas tell each other what they invalidated. TieredCache publishes every tag and key it
 * drops, and applies what other replicas publish to its process-private tiers (tier.ts `clear`);
 * the shared tiers were already dropped by the replica that published.
 *
 * Delivery is best effort (Redis pub/sub keeps nothing for later): a bus that may have missed
 * messages says so with `{ kind: 'all' }`, and the listener forgets everything rather than
 * serve what may have been invalidated. A publish that did not get out says so (false), and the
 * publisher retries it within a bound (pending-invalidations.ts).
 */

/**
 * What the bus carries. `all`: another replica purged everything, or (`missed: true`, said by
 * this replica's own bus, never received) messages may have been missed: the subscriber
 * reconnected. `forget`: a credential the instance refused (401), by its HMAC (never the token):
 * every replica drops its identity (src/proxy/callers/identity.ts); the cache tiers ignore it.
 * `access-refused`: the instance refused a user (401/403/404) on a project whose answers are
 * shared (`cache.sharing: project`): every replica drops that user's confirmation and grants of
 * the project (src/proxy/callers/access-grants.ts) and no grant asked before `at` is taken any more; the
 * cache tiers ignore it (one member's refusal never evicts a team's entries).
 */
export type InvalidationMessage =
  | { kind: 'tag'; tag: string }
  | { kind: 'key'; key: string }
  | { kind: 'all'; missed?: true }
  | { kind: 'forget'; credentialId: string }
  | { kind: 'access-refused'; userId: number; projectId: number; at: number };
export type InvalidationListener = (message: InvalidationMessage) => void;

export interface InvalidationBus {
  /**
   * Sends to every other replica listening now; never rejects (a lost message is a failure counted
   * by the bus). False when the message did not get out: TieredCache retries it (pending-invalidations.ts).
   */
  publish(message: InvalidationMessage): Promise<boolean>;
  /** Calls `listener` for every message another replica published; returns the unsubscribe. */
  onInvalidate(listener: InvalidationListener): () => void;
  /** Waits (bounded) until the bus can send and is listening; false at the timeout. */
  ready(timeoutMs: number): Promise<boolean>;
}
