/**
 * Token → caller, through upstream `GET /user`.
 *
 * A caller's scope is `u:<user id>`: several tokens of the same user share that user's entries.
 * Admin-only answers are shared in the `admin` scope among callers verified as admins: a caller is
 * verified by a 200 from an admin-only operation, remembered for `access.ttlMs`.
 *
 * Credentials: the in-process memo is keyed by the Authorization header as received, because an
 * HMAC per request would cost ~1.7 µs on the hit path (measured: a tenth of a core at 50k req/s).
 * That memo lives only in this process's heap, bounded and expiring with `identity.ttlMs`, as the
 * request itself does. Everything that leaves the process (Redis, logs, metrics, cache keys) only
 * ever sees the HMAC-SHA256 of the credential.
 */
import { brotliDecompressSync, gunzipSync, inflateSync } from 'node:zlib';
import type { SharedTierBudget } from '../cache/budget.js';
import type { Coalescer } from '../cache/coalesce.js';
import { hmacCredential, userScope, type Scope } from '../cache/key.js';
import { UPSTREAM_HEADERS, UpstreamError, type Upstream, type UpstreamResponse } from '../upstream/client.js';

export interface Caller {
  readonly userId: number;
  readonly scope: Scope;
  /** HMAC of the credential: the only form of it that may be logged, shared or stored. */
  readonly credentialId: string;
  /** The identity is trusted until then; past it, it is only good to serve stale entries while upstream fails. */
  readonly verifiedUntil: number;
  /** Verified site admin until then (0: not verified). */
  adminUntil: number;
}

export type IdentityResult =
  | { readonly kind: 'caller'; readonly caller: Caller }
  /** Upstream refused the credential (401/403): relay this answer verbatim. */
  | { readonly kind: 'refused'; readonly response: UpstreamResponse };

/** Where identities and admin verifications are shared between replicas (the Redis tier). */
export interface SharedStore {
  /** `isValid`: what the reader accepts; anything else read back is a miss (and dropped). */
  getJson<T>(namespace: string, key: string, options?: { budget?: SharedTierBudget | undefined; isValid?: (value: unknown) => boolean }): Promise<T | undefined>;
  setJson(namespace: string, key: string, value: unknown, ttlMs: number, budget?: SharedTierBudget): Promise<void>;
}

export interface IdentityOptions {
  readonly ttlMs: number;
  readonly accessTtlMs: number;
  readonly maxEntries: number;
  readonly hmacSecret: Buffer;
  readonly upstream: Upstream;
  readonly coalescer: Coalescer<IdentityResult>;
  readonly shared?: SharedStore | undefined;
  readonly now: () => number;
}

interface SharedIdentity {
  readonly userId: number;
}

export class IdentityResolver {
  private readonly memo = new Map<string, Caller>();

  constructor(private readonly options: IdentityOptions) {}

  /** The hit path: a verified caller for this header, or undefined. No allocation, no hashing. */
  peek(authorization: string, now: number): Caller | undefined {
    const caller = this.memo.get(authorization);
    return caller !== undefined && now < caller.verifiedUntil ? caller : undefined;
  }

  /** A caller whose verification has lapsed: good only for serving stale entries while upstream fails. */
  peekLapsed(authorization: string): Caller | undefined {
    return this.memo.get(authorization);
  }

  /** Resolves through the shared store, then upstream; concurrent resolutions of one credential coalesce. */
  resolve(authorization: string, budget?: SharedTierBudget): Promise<IdentityResult> {
    const credentialId = hmacCredential(this.options.hmacSecret, authorization);
    return this.options.coalescer.run(credentialId, () => this.lookup(authorization, credentialId, budget)).promise;
  }

  /** After an upstream 401 for this credential: never trust it again without asking. */
  forget(authorization: string): void {
    const caller = this.memo.get(authorization);
    this.memo.delete(authorization);
    if (caller && this.options.shared) {
      void this.options.shared.setJson('identity', caller.credentialId, null, 1);
    }
  }

  isVerifiedAdmin(caller: Caller, now: number): boolean {
    return now < caller.adminUntil;
  }

  /** A 200 from an admin-only operation proves the caller is a site admin. */
  markAdmin(caller: Caller): void {
    caller.adminUntil = this.options.now() + this.options.accessTtlMs;
    void this.options.shared?.setJson('admin', String(caller.userId), caller.adminUntil, this.options.accessTtlMs);
  }

  /** A 403 from an admin-only operation: the caller is no admin (any more). */
  clearAdmin(caller: Caller): void {
    caller.adminUntil = 0;
    void this.options.shared?.setJson('admin', String(caller.userId), 0, this.options.accessTtlMs);
  }

  get size(): number {
    return this.memo.size;
  }

  private async lookup(authorization: string, credentialId: string, budget?: SharedTierBudget): Promise<IdentityResult> {
    const shared = await this.options.shared?.getJson<SharedIdentity | null>('identity', credentialId, { budget, isValid: isSharedIdentity });
    if (shared) return { kind: 'caller', caller: await this.remember(authorization, credentialId, shared.userId, budget) };

    const res = await this.options.upstream.get('/api/v1/user', { authorization, ...UPSTREAM_HEADERS });
    if (res.status === 200) {
      const userId = parseUserId(decodedBody(res));
      if (userId === undefined) throw new UpstreamError('reset', 'the upstream answered GET /user with no user id');
      void this.options.shared?.setJson('identity', credentialId, { userId }, this.options.ttlMs, budget);
      return { kind: 'caller', caller: await this.remember(authorization, credentialId, userId, budget) };
    }
    // An instance that fails is not a verdict on the credential: the caller may get stale answers.
    if (res.status >= 500) throw new UpstreamError('reset', `the upstream answered ${res.status} to GET /user`);
    if (res.status === 401) this.forget(authorization);
    // 401, 403, 429, or anything unexpected from GET /user: the caller sees the instance's own answer.
    return { kind: 'refused', response: res };
  }

  private async remember(authorization: string, credentialId: string, userId: number, budget?: SharedTierBudget): Promise<Caller> {
    const now = this.options.now();
    const sharedAdminUntil = await this.options.shared?.getJson<number>('admin', String(userId), { budget, isValid: isAdminUntil });
    const previous = this.memo.get(authorization);
    const caller: Caller = {
      userId,
      scope: userScope(userId),
      credentialId,
      verifiedUntil: now + this.options.ttlMs,
      adminUntil: Math.max(previous?.userId === userId ? previous.adminUntil : 0, sharedAdminUntil ?? 0),
    };
    this.memo.delete(authorization);
    if (this.memo.size >= this.options.maxEntries) this.evictOldest();
    this.memo.set(authorization, caller);
    return caller;
  }

  private evictOldest(): void {
    // Map iterates in insertion order and remember() re-inserts, so the first key is the oldest.
    const oldest = this.memo.keys().next();
    if (!oldest.done) this.memo.delete(oldest.value);
  }
}

/** What identity.ts writes to the shared store, checked when read back: a user id (a scope), or null (forgotten). */
function isSharedIdentity(value: unknown): boolean {
  if (value === null) return true;
  const userId = (value as Partial<SharedIdentity> | null)?.userId;
  return typeof value === 'object' && typeof userId === 'number' && Number.isSafeInteger(userId) && userId >= 0;
}

function isAdminUntil(value: unknown): boolean {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0;
}

/** The body of GET /user, decoded if the instance compressed it although asked not to. */
function decodedBody(res: UpstreamResponse): Buffer {
  try {
    switch (res.headers['content-encoding']) {
      case 'gzip':
      case 'x-gzip':
        return gunzipSync(res.body);
      case 'deflate':
        return inflateSync(res.body);
      case 'br':
        return brotliDecompressSync(res.body);
      default:
        return res.body;
    }
  } catch {
    return Buffer.alloc(0);
  }
}

function parseUserId(body: Buffer): number | undefined {
  try {
    const user = JSON.parse(body.toString('utf8')) as { id?: unknown };
    return typeof user.id === 'number' && Number.isSafeInteger(user.id) ? user.id : undefined;
  } catch {
    return undefined;
  }
}
