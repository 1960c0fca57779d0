/**
 * The index of derived answers across replicas (docs/how-it-works.md, "Derived answers"): for
 * each name a list page can answer for (`u:7|run:42`, one resource it holds; a list's identity,
 * its scope, operation, path ids and filters), a sorted set in Redis of the cache keys of the
 * pages stored for it, scored by the moment each stops being fresh. Written with the entry
 * (tier.ts), read on a miss the memory index cannot answer (derive/deriver.ts).
 *
 * Only a hint: a member names a key whose entry may be gone, replaced or another's, so the entry
 * itself is read through the tier (MAC-checked, decrypted, its claims bounded) and judged; a
 * member is never trusted for what it says. Bounded: a set keeps its `MAX_MEMBERS` freshest,
 * drops members no longer fresh on every write, and lives no longer than its freshest member
 * (never longer than any entry it names lives in Redis). One key per command: a cluster needs no
 * two of them in one slot.
 *
 * Key names: `<prefix>derive:<name>`. A name holds a scope (`u:7`, `p:4`, `admin`: ids, never a
 * credential) and what the question names; a list identity longer than `MAX_INLINE_NAME_CHARS` is
 * replaced by its SHA-256, as key.ts shortens a long query.
 */
import { createHash } from 'node:crypto';
import type { SharedTierBudget } from '../budget.js';
import type { RedisClient } from './client.js';
import type { RedisConnection } from './connection.js';

/** A set keeps at most this many pages (the freshest): a lookup reads a few of them. */
const MAX_MEMBERS = 32;

/** Names longer than this are hashed, to keep Redis keys short. */
const MAX_INLINE_NAME_CHARS = 160;

export const DERIVE_SCRIPTS = {
  // Adds a page (scored by its fresh-until), drops members no longer fresh and all but the
  // freshest MAX_MEMBERS, and extends (never shortens) the set's TTL to the page's freshness.
  tmcDeriveAdd: {
    numberOfKeys: 1,
    lua: `redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[3])
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -${MAX_MEMBERS + 1})
local ttl = tonumber(ARGV[4])
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
return 1`,
  },
};

interface DeriveCommands {
  tmcDeriveAdd(setKey: string, member: string, freshUntil: number, now: number, ttlMs: number): Promise<number>;
}

/** The Redis key of a name's set. */
export function deriveSetKey(connection: RedisConnection, name: string): string {
  const short = name.length > MAX_INLINE_NAME_CHARS ? `#${createHash('sha256').update(name).digest('base64url')}` : name;
  return `${connection.keyPrefix}derive:${short}`;
}

/**
 * The commands that record `key` (an entry fresh until `freshUntil`) under each of `names`, to be
 * sent with the entry's own write. Nothing when it is no longer fresh.
 */
export function addToDeriveSets(
  c: RedisClient,
  setKeys: readonly string[],
  key: string,
  times: { readonly freshUntil: number; readonly now: number },
): Promise<number>[] {
  const ttlMs = Math.ceil(times.freshUntil - times.now);
  if (ttlMs <= 0) return [];
  return setKeys.map((setKey) => (c as unknown as DeriveCommands).tmcDeriveAdd(setKey, key, times.freshUntil, times.now, ttlMs));
}

/**
 * The keys of the `limit` freshest pages recorded under `name` that are still fresh at `now`:
 * one command, under the request's budget (a timeout spends it) and the breaker; none when Redis
 * cannot answer.
 */
export async function deriveCandidates(
  connection: RedisConnection,
  name: string,
  query: { readonly now: number; readonly limit: number },
  budget?: SharedTierBudget,
): Promise<string[]> {
  const setKey = deriveSetKey(connection, name);
  const found = await connection.call('derive', (c) => c.zrevrangebyscore(setKey, '+inf', query.now, 'LIMIT', 0, query.limit), budget);
  return found ?? [];
}
