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
 *
 * Bounds (identity-memo.ts), so that no flood of credentials grows memory without end: the header memo is bounded in bytes;
 * a header seen for the first time is normalized once (scheme case, whitespace) and its HMAC finds
 * the caller of any other spelling of the same token, so one token is one GET /user. A 401 is
 * remembered by HMAC for `identity.refusedTtlMs`, so repeated junk tokens never reach upstream;
 * the look-ups that do go through their own upstream lane (`identity.maxConcurrent`).
 * Revocation across replicas: a shared identity carries the absolute time it was verified until,
 * and a replica that reads it trusts it only until then (never `identity.ttlMs` from its read).
 * Forgetting a credential (a 401) is published on the invalidation bus by its HMAC, never the
 * token, and every replica drops the memo entries of that credential.
 */
import { brotliDecompressSync, gunzipSync, inflateSync } from 'node:zlib';
import type { SharedTierBudget } from '../../cache/budget.js';
import type { InvalidationBus, InvalidationMessage } from '../../cache/invalidation.js';
import { hmacCredential, userScope } from '../../cache/key.js';
import { SharedFill, type ShareWrite, type SharedFillJob, type SharedLock } from '../../cache/shared-fill.js';
import { answerFailure, classifyAnswer } from '../../upstream/answer.js';
import { UPSTREAM_HEADERS, UpstreamError, type Upstream, type UpstreamResponse } from '../../upstream/client.js';
import { IdentityMemo, normalizeAuthorization, type IdentityMemoOptions } from './identity-memo.js';
import type { RetryAfterGate } from './retry-after.js';
import type { Caller } from './caller.js';
import { unverifiedRequester, type Requester } from './requester.js';

export type IdentityResult =
  | {
      readonly kind: 'caller';
      readonly caller: Caller;
      readonly via?: 'shared' | 'upstream';
      /** The instance's 200 to GET /user that verified the caller (`via: 'upstream'`): a `GET /user` asked through tm-cache is answered with it, never asked twice. */
      readonly answer?: UpstreamResponse;
    }
  /** Upstream refused the credential (401/403): relay this answer verbatim. */
  | { readonly kind: 'refused'; readonly response: UpstreamResponse };

/** Where identities and admin verifications are shared between replicas (the Redis tier). */
export interface SharedStore {
  /** `isValid`: what the reader accepts; anything else read back is a miss (and dropped). */
  getJson<T>(
    namespace: string,
    key: string,
    options?: { budget?: SharedTierBudget | undefined; isValid?: (value: unknown) => boolean },
  ): Promise<T | undefined>;
  setJson(namespace: string, key: string, value: unknown, ttlMs: number, budget?: SharedTierBudget): Promise<void>;
  /** Several values of one namespace at once: one call, at most one timeout. */
  setJsonMany(namespace: string, values: readonly (readonly [key: string, value: unknown])[], ttlMs: number, budget?: SharedTierBudget): Promise<void>;
}

/** The lock role (shared-fill.ts) over a namespace of the shared store, values read back as `isValid` accepts (RedisSharedStore). */
export interface SharedLocks {
  lockFor<T>(namespace: string, isValid?: (value: unknown) => boolean): SharedLock<T>;
}

export type IdentityLookupResult = 'memo' | 'shared' | 'upstream' | 'refused' | 'error';

export interface IdentityOptions extends IdentityMemoOptions {
  /** How each identification ended (metrics); the pipeline reports its own memo hits. */
  readonly onLookup?: ((result: IdentityLookupResult) => void) | undefined;
  readonly ttlMs: number;
  readonly accessTtlMs: number;
  /** How long a replica's look-up lock holds, and how long the others wait for its identity (`cache.redis.lockTtlMs`, `lockWaitMs`). */
  readonly lockTtlMs?: number;
  readonly lockWaitMs?: number;
  /** How long the others follow a replica's look-up while it holds the lock (shared-fill.ts `followMs`). */
  readonly followMs?: number | undefined;
  readonly hmacSecret: Buffer;
  /** Where a credential never seen goes (its own lane: junk cannot take the fills' slots), as its client address, `unverified`. */
  readonly upstream: Upstream;
  /**
   * Where the renewal of a credential seen before goes (the fills' lane), as its user, `client`:
   * a known caller never waits behind unknown credentials, in the budget or in a lane. Absent: `upstream`.
   */
  readonly knownUpstream?: Upstream | undefined;
  readonly shared?: SharedStore | undefined;
  /** Where a replica's look-up takes its lock, so that the others wait for the identity it shares (Redis); memory-only has none. */
  readonly sharedLocks?: SharedLocks | undefined;
  /** Bounds the Retry-After of a relayed refusal (`upstream.maxRetryAfterMs`). */
  readonly retryAfter: Pick<RetryAfterGate, 'bounded'>;
  /** Where forgotten credentials are announced to, and heard from, the other replicas. */
  readonly bus?: InvalidationBus | undefined;
  readonly now: () => number;
}

interface SharedIdentity {
  readonly userId: number;
  /** Verified until then (ms since epoch), by whichever replica asked upstream. */
  readonly until: number;
}

type SharedIdentityValue = SharedIdentity | null;

export class IdentityResolver {
  private readonly memo: IdentityMemo;
  /** Look-ups in flight: coalesced per credential here, one replica asking upstream for the fleet. */
  readonly #lookups: SharedFill<SharedIdentityValue, IdentityResult>;
  /** The last expiry a renewal shared of each caller (`renew`). */
  readonly #sharedUntil = new WeakMap<Caller, number>();

  /** New identity and access TTLs (a reload): identities verified from now on follow them. */
  reconfigure(ttls: Pick<IdentityOptions, 'ttlMs' | 'accessTtlMs' | 'refusedTtlMs'>): void {
    this.options = { ...this.options, ...ttls };
    this.memo.reconfigure(ttls.refusedTtlMs);
  }

  constructor(private options: IdentityOptions) {
    this.memo = new IdentityMemo(options);
    this.#lookups = new SharedFill({
      lock: options.sharedLocks?.lockFor<SharedIdentityValue>('identity', isSharedIdentity),
      lockTtlMs: options.lockTtlMs ?? 5_000,
      lockWaitMs: options.lockWaitMs ?? 2_000,
      followMs: options.followMs,
    });
    options.bus?.onInvalidate((message) => this.onInvalidation(message));
  }

  /** `identity.ttlMs`: how long a verification is trusted. */
  get ttlMs(): number {
    return this.options.ttlMs;
  }

  /** The hit path: a verified caller for this header, or undefined. No allocation, no hashing. */
  peek(authorization: string, now: number): Caller | undefined {
    const caller = this.memo.get(authorization);
    return caller !== undefined && now < caller.verifiedUntil ? caller : undefined;
  }

  /** Is `credential` still its caller's here, verified at `now`? (A credential kept for refreshes: refreshers.ts.) */
  isLive(credential: { readonly caller: Caller; readonly authorization: string }, now: number): boolean {
    return this.peek(credential.authorization, now) === credential.caller;
  }

  /**
   * A 200 from the instance to a request asked with this credential at `askedAt` (a fill or a
   * refresh): the token was live then, as a GET /user asked then would have said, and a token
   * names one user for its life. Its identity is trusted until `askedAt + identity.ttlMs`, never
   * beyond: counted from the question, as a look-up's is, so a token revoked upstream is still
   * refused within identity.ttlMs of the last answer it got. Only a caller this memo still holds
   * for the header is renewed: one forgotten since (a 401, here or on another replica) is not
   * brought back. Shared as the look-up's identity is, at most about four times per identity.ttlMs.
   */
  renew(authorization: string, caller: Caller, askedAt: number, budget?: SharedTierBudget): void {
    if (this.memo.get(authorization) !== caller) return;
    const ttlMs = this.options.ttlMs;
    const until = askedAt + ttlMs;
    if (until <= caller.verifiedUntil) return;
    caller.verifiedUntil = until;
    const shared = this.options.shared;
    const leftMs = until - this.options.now();
    if (shared === undefined || leftMs <= 0 || until - (this.#sharedUntil.get(caller) ?? 0) < ttlMs / 4) return;
    this.#sharedUntil.set(caller, until);
    const identity: SharedIdentity = { userId: caller.userId, until };
    void shared.setJson('identity', caller.credentialId, identity, leftMs, budget);
  }

  /** A caller whose verification has lapsed: good only for serving stale entries while upstream fails. */
  peekLapsed(authorization: string): Caller | undefined {
    return this.memo.get(authorization);
  }

  /**
   * Resolves through the shared store, then upstream; concurrent resolutions of one credential
   * coalesce. `address`: the client's, whose turn a credential never seen takes (requester.ts).
   */
  resolve(authorization: string, budget?: SharedTierBudget, address?: string): Promise<IdentityResult> {
    // The first sight of this spelling: parsed once, so every spelling of a token is one identity.
    const credentialId = hmacCredential(this.options.hmacSecret, normalizeAuthorization(authorization));
    const now = this.options.now();
    const known = this.memo.adopt(authorization, credentialId, now);
    if (known !== undefined) {
      this.options.onLookup?.('memo');
      return Promise.resolve({ kind: 'caller', caller: known });
    }
    const refused = this.memo.refusal(credentialId, now);
    if (refused !== undefined) {
      this.options.onLookup?.('refused');
      return Promise.resolve({ kind: 'refused', response: refused });
    }
    const run = this.#lookups.run(this.#lookup(authorization, credentialId, budget, address));
    if (run.leader) this.#count(run.promise);
    return run.promise;
  }

  /** One look-up's result, counted once however many requests wait for it (counted before any of them sees it). */
  #count(lookup: Promise<IdentityResult>): void {
    const onLookup = this.options.onLookup;
    if (onLookup === undefined) return;
    void lookup.then(
      (result) => onLookup(result.kind === 'refused' ? 'refused' : (result.via ?? 'upstream')),
      () => onLookup('error'),
    );
  }

  /** After an upstream 401 for this credential: never trust it again without asking. */
  forget(authorization: string): void {
    const caller = this.memo.get(authorization);
    this.memo.delete(authorization);
    // Only a credential this replica knew is announced: junk tokens cost the others nothing.
    if (caller === undefined) return;
    this.memo.deleteCredential(caller.credentialId);
    void this.options.shared?.setJson('identity', caller.credentialId, null, 1);
    void this.options.bus?.publish({ kind: 'forget', credentialId: caller.credentialId });
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

  /** Another replica forgot a credential, or messages may have been lost (`all`): so do we. */
  private onInvalidation(message: InvalidationMessage): void {
    if (message.kind === 'forget') this.memo.deleteCredential(message.credentialId);
    else if (message.kind === 'all') this.memo.clear();
  }

  stats(): ReturnType<IdentityMemo['stats']> {
    return this.memo.stats();
  }

  /**
   * A credential's look-up: the identity another replica shared, else GET /user. Another replica
   * may be asking upstream for this credential right now (a fleet's first burst): this one waits
   * for the identity it shares rather than ask too. A replica that dies holding the lock, or is
   * refused, costs the others one wait of at most lockWaitMs, then they ask.
   */
  #lookup(
    authorization: string,
    credentialId: string,
    budget: SharedTierBudget | undefined,
    address: string | undefined,
  ): SharedFillJob<SharedIdentityValue, IdentityResult> {
    // Whose this credential was when last verified, here or by another replica: a known caller's renewal.
    let seenAs = this.memo.get(authorization)?.userId;
    return {
      key: credentialId,
      lockKey: credentialId,
      // Replicas waiting for this identity find it, and so does a request to another replica after this answer.
      answerAfterShare: true,
      budget,
      lookup: async () => {
        const shared = await this.options.shared?.getJson<SharedIdentityValue>('identity', credentialId, { budget, isValid: isSharedIdentity });
        // Lapsed, it still tells whose the credential was (a forgotten one is null: unknown again).
        seenAs ??= shared?.userId;
        return this.#trusted(shared) ? this.#fromShared(authorization, credentialId, shared, budget) : undefined;
      },
      adopt: (waited) => (this.#trusted(waited) ? this.#fromShared(authorization, credentialId, waited, budget) : undefined),
      produce: (share) => this.#askUpstream(authorization, credentialId, budget, share, seenAs === undefined ? unverifiedRequester(address) : seenAs),
    };
  }

  /** Trusted until the expiry its first verifier stored, never longer (an older form without one is not trusted). */
  #trusted(shared: SharedIdentity | null | undefined): shared is SharedIdentity {
    return shared !== null && shared !== undefined && this.options.now() < shared.until;
  }

  async #fromShared(authorization: string, credentialId: string, shared: SharedIdentity, budget?: SharedTierBudget): Promise<IdentityResult> {
    return { kind: 'caller', via: 'shared', caller: await this.remember(authorization, credentialId, shared.userId, shared.until, budget) };
  }

  /**
   * GET /user with the credential; `share` is handed the write of the identity, which replicas
   * waiting for it read. `asked`: the user it was last verified as (a renewal: the fills' lane, at
   * `client`), or the requester a credential never seen takes the turn of (its own lane, `unverified`).
   */
  async #askUpstream(
    authorization: string,
    credentialId: string,
    budget: SharedTierBudget | undefined,
    share: ShareWrite,
    asked: number | Requester,
  ): Promise<IdentityResult> {
    // Counted from the question, not the answer: the identity never outlives identity.ttlMs.
    const until = this.options.now() + this.options.ttlMs;
    const headers = { authorization, ...UPSTREAM_HEADERS };
    const res =
      typeof asked === 'number'
        ? await (this.options.knownUpstream ?? this.options.upstream).get('/api/v1/user', headers, asked, 'client')
        : await this.options.upstream.get('/api/v1/user', headers, asked.caller, asked.priority);
    // Only the API's own answer is a verdict: an SSO page (HTML 200) is no caller, whatever it
    // holds; an instance that fails is no verdict on the credential (the caller may get stale answers).
    const failure = answerFailure(res, 'GET /user');
    if (failure !== undefined) throw failure;
    const answer = classifyAnswer(res);
    if (answer === 'ok') {
      const userId = parseUserId(decodedBody(res));
      if (userId === undefined) throw new UpstreamError('reset', 'the upstream answered GET /user with no user id');
      const shared: SharedIdentity = { userId, until };
      share(this.options.shared?.setJson('identity', credentialId, shared, until - this.options.now(), budget));
      return { kind: 'caller', via: 'upstream', caller: await this.remember(authorization, credentialId, userId, until, budget), answer: res };
    }
    if (answer === 'unauthorized') {
      this.forget(authorization);
      this.memo.refuse(credentialId, res, this.options.now());
    }
    // 401, 403, 429, a redirect, or anything unexpected from GET /user: the caller sees the
    // instance's own answer, its Retry-After within the cap.
    return { kind: 'refused', response: this.options.retryAfter.bounded(res, this.options.now()) };
  }

  private async remember(authorization: string, credentialId: string, userId: number, verifiedUntil: number, budget?: SharedTierBudget): Promise<Caller> {
    // An admin verification is shared as its absolute expiry too: trusted until then, not from this read.
    const sharedAdminUntil = await this.options.shared?.getJson<number>('admin', String(userId), { budget, isValid: isAdminUntil });
    const previous = this.memo.get(authorization);
    const caller: Caller = {
      userId,
      scope: userScope(userId),
      credentialId,
      verifiedUntil,
      adminUntil: Math.max(previous?.userId === userId ? previous.adminUntil : 0, sharedAdminUntil ?? 0),
    };
    this.memo.set(authorization, caller);
    return caller;
  }
}

/** What identity.ts writes to the shared store, checked when read back: a user id and its expiry, or null (forgotten). */
function isSharedIdentity(value: unknown): boolean {
  if (value === null) return true;
  const { userId, until } = (value ?? {}) as Partial<SharedIdentity>;
  return (
    typeof value === 'object' &&
    typeof userId === 'number' &&
    Number.isSafeInteger(userId) &&
    userId >= 0 &&
    typeof until === 'number' &&
    Number.isFinite(until)
  );
}

function isAdminUntil(value: unknown): boolean {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0;
}

/** The body of GET /user, decoded if the instance compressed it although asked not to. */
/** A user object is well under a kilobyte; a GET /user that inflates past this is not one. */
const MAX_USER_BODY_BYTES = 64 * 1024;

function decodedBody(res: UpstreamResponse): Buffer {
  // Bounded: a small compressed body may inflate to gigabytes (a decompression bomb); past the
  // bound zlib throws, and an unreadable body is no caller.
  const bounded = { maxOutputLength: MAX_USER_BODY_BYTES };
  try {
    switch (res.headers['content-encoding']) {
      case 'gzip':
      case 'x-gzip':
        return gunzipSync(res.body, bounded);
      case 'deflate':
        return inflateSync(res.body, bounded);
      case 'br':
        return brotliDecompressSync(res.body, bounded);
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
