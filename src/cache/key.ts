/**
 * Cache keys and credential digests.
 *
 * A key is `<scope>|<version>|<operation>|<path ids>|<canonical query>`: the scope first (`u:42`
 * for a user's entries, `admin` for admin-only answers shared among verified admins, `p:4` for a
 * project's answers shared among its proven members in `cache.sharing: project`), so no two
 * callers' questions ever share a key unless they share an access level. Keys are stable across
 * processes (the Redis tier shares them between replicas) and short: a long canonical query is
 * replaced by its SHA-256. Raw credentials never appear in a key: they are HMAC'd.
 */
import { createHash, createHmac, randomBytes } from 'node:crypto';
import type { CanonicalRequest } from '../api/normalize.js';

/** Bump when the stored form or the meaning of a key changes: old entries simply stop matching. */
export const KEY_VERSION = 'v1';
/** Canonical queries longer than this are hashed to keep keys short. */
const MAX_INLINE_QUERY_CHARS = 96;

/** A user's own (`u:42`), the verified admins' (`admin`), or one project's, shared by its proven members (`p:4`: `cache.sharing: project`). */
export type Scope = `u:${number}` | 'admin' | `p:${number}`;

export function userScope(userId: number): Scope {
  return `u:${userId}`;
}

export const ADMIN_SCOPE: Scope = 'admin';

export function projectScope(projectId: number): Scope {
  return `p:${projectId}`;
}

/** What a log line, a Cache-Status or /admin/entries says of a scope: its kind, never the id in it. */
export type ScopeKind = 'user' | 'admin' | 'project' | 'other';

function scopeKind(scope: string): ScopeKind {
  if (scope.startsWith('u:')) return 'user';
  if (scope.startsWith('p:')) return 'project';
  return scope === ADMIN_SCOPE ? 'admin' : 'other';
}

/**
 * The scope-independent part of a key. Computed once per distinct request URL (the proxy memoizes
 * it), so the hit path only concatenates the scope in front of it.
 */
export function makeKeySuffix(req: CanonicalRequest): string {
  const ids = req.op.pathIds.map((name) => req.ids[name]).join(',');
  const query = req.query.length > MAX_INLINE_QUERY_CHARS ? `#${sha256(req.query)}` : req.query;
  return `|${KEY_VERSION}|${req.op.id}|${ids}|${query}`;
}

/** The tag every entry of one operation and path ids carries: `op:listRuns:5`, `op:listProjects`. */
export function operationTag(op: { readonly id: string; readonly pathIds: readonly string[] }, ids: Readonly<Record<string, number | undefined>>): string {
  return op.pathIds.length === 0 ? `op:${op.id}` : `op:${op.id}:${op.pathIds.map((name) => ids[name]).join(',')}`;
}

export function makeKey(scope: Scope, suffix: string): string {
  return scope + suffix;
}

function sha256(s: string): string {
  return createHash('sha256').update(s).digest('base64url');
}

/** HMAC-SHA256 of a credential: what is stored or shared instead of the credential itself. */
export function hmacCredential(secret: Buffer, credential: string): string {
  return createHmac('sha256', secret).update(credential).digest('base64url');
}

/**
 * What a log line may say about a cache key: its scope's kind (`user`, `admin` or `project`, never the
 * user or project id), its operation, and a short digest that lets lines about one key be matched up. The digest
 * is an HMAC under a random key of this process, so it cannot be reversed by guessing user ids
 * and queries (a plain hash of such a small space could be).
 */
export interface KeyForLog {
  readonly scope: string;
  readonly operation?: string;
  readonly keyDigest: string;
}

const LOG_DIGEST_KEY = randomBytes(32);
const LOG_DIGEST_CHARS = 12;

export function describeKey(key: string): KeyForLog {
  const [scope = '', , operation] = key.split('|', 3);
  return { scope: scopeKind(scope), ...(operation ? { operation } : {}), keyDigest: logDigest(key) };
}

/**
 * As `describeKey`, for a Redis key: an entry or its lock (`<prefix>{<key>}`) shows its cache
 * key's kind and operation; a shared value (`<prefix>json:<namespace>:<id>`) its namespace only
 * (its id is a user id or a credential's HMAC).
 */
export function describeRedisKey(redisKey: string, prefix: string): KeyForLog {
  const rest = redisKey.startsWith(prefix) ? redisKey.slice(prefix.length) : redisKey;
  const entry = /^\{(.*)\}(:lock)?$/.exec(rest);
  if (entry) return { ...describeKey(entry[1]!), keyDigest: logDigest(redisKey) };
  const shared = /^json:([^:]*):/.exec(rest);
  return { scope: shared ? `json:${shared[1]}` : 'other', keyDigest: logDigest(redisKey) };
}

function logDigest(text: string): string {
  return createHmac('sha256', LOG_DIGEST_KEY).update(text).digest('base64url').slice(0, LOG_DIGEST_CHARS);
}
