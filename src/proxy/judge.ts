/**
 * The read-through's verdict on one decided request and what it holds: computed once, through
 * named predicates, then acted on by one switch in `ReadThrough` (undici's cache interceptor
 * does the same in `handleResult`: stale and revalidate computed once, then one chain acts).
 *
 *   held, and its project's access not confirmed ── rate-limited ─▶ rate-limited (never the entry)
 *        │                                        ├ names a project ─▶ confirm-access
 *        │                                        └ names none (`GET /projects`) ─▶ fill-unconfirmed
 *        ▼ held, and the client did not ask to revalidate
 *   fresh ─▶ fresh │ within stale-while-revalidate ─▶ stale-while-revalidate
 *        ▼
 *   caller rate-limited ─▶ rate-limited (stale within stale-if-error, if held)
 *        ▼
 *   fill, or fill-from-instance when no entry another replica stored may answer it
 *
 * A project's shared answer (gate `member`, `cache.sharing: project`) is read only with proof,
 * three conditions checked before anything else, without I/O:
 *
 *   access to the project confirmed within access.projectConfirmMs ── no ─▶ confirm-access (held)
 *        │                                                             └ nothing held ─▶ fill-own
 *        ▼ a grant for every area the answer reveals, within access.grantTtlMs
 *   no ── held, not looked up yet ─▶ find-grants (the shared store: another replica's grants)
 *        └ otherwise ─▶ fill-own: under the caller's own token, coalesced with their own requests only
 *
 * The third, no refusal since, is kept by the grants and confirmations themselves: a refusal
 * drops them on every replica (access-grants.ts).
 *
 * Pure: it reads the callers' rate limits and project confirmations and changes nothing, so a
 * table of cases tests it (test/proxy/judge.unit.test.ts). The common verdicts are constants: a hit
 * allocates nothing here.
 */
import { isFresh, isUsableOnError, isUsableWhileRevalidating, type CacheEntry } from '../cache/entry.js';
import type { TierName } from '../cache/tier.js';
import { projectOf } from './callers/access-confirmation.js';
import type { CallerProofs } from './callers/proofs.js';
import type { Decision } from './decide.js';
import type { RetryAfterGate } from './callers/retry-after.js';

/** An entry held for a key and the tier it came from. */
export interface Found {
  readonly entry: CacheEntry;
  readonly tier: TierName;
}

export type Verdict =
  /** Fresh, and this caller may be served it: a hit. */
  | { readonly kind: 'fresh' }
  /** Stale within stale-while-revalidate (RFC 5861): served, and refreshed in the background. */
  | { readonly kind: 'stale-while-revalidate' }
  /** The caller's access to the entry's project lapsed: asked first (access-confirmation.ts). */
  | { readonly kind: 'confirm-access'; readonly projectId: number }
  /**
   * The instance rate-limited this caller (retry-after.ts): nothing is asked of it for
   * `blockedMs`; `stale` is what may be served meanwhile (within stale-if-error), if anything.
   */
  | { readonly kind: 'rate-limited'; readonly blockedMs: number; readonly stale: Found | undefined }
  /** Filled (coalesced); an entry another replica stored since the look-up may answer it. */
  | { readonly kind: 'fill' }
  /** Filled, answered by the instance itself: never by an entry another replica stored. */
  | { readonly kind: 'fill-from-instance' }
  /**
   * Held, but its projects cannot be confirmed one by one (`GET /projects`; the results of a run
   * whose project this replica never learned) and past `access.projectConfirmMs` from its fill:
   * filled from the instance, whose answer is the confirmation; while the instance fails, the
   * held entry is served only as to any caller whose access could not be confirmed.
   */
  | { readonly kind: 'fill-unconfirmed' }
  /** A member's grants for the answer's areas are not held here: looked up in the shared store, then judged again. */
  | { readonly kind: 'find-grants' }
  /**
   * A project's shared answer, and the caller without proof of access to it: filled under their
   * own token, coalesced only with their own requests, answered by the instance. Its 200 earns
   * the grant and refreshes the shared entry; a refusal is relayed.
   */
  | { readonly kind: 'fill-own' };

export type FillVerdict = Extract<Verdict['kind'], 'fill' | 'fill-from-instance' | 'fill-unconfirmed' | 'fill-own'>;

/** Why the request is judged: each occasion changes what is checked again, or what a fill may accept. */
export type Occasion =
  /** The tiers' answer (or nothing: a caller who may not read the key is not looked up). */
  | 'lookup'
  /** An entry another replica stored since the look-up, found by the fill: judged as the Redis hit it is, access included, but a fill after it asks the instance. */
  | 'stored-earlier'
  /** This request's access to the entry's project was just confirmed upstream: not checked again (with `access.projectConfirmMs: 0` it would never pass). */
  | 'access-confirmed'
  /** The instance did not confirm this request's access: nothing held is served, the instance answers. */
  | 'access-refused'
  /** A member's access was confirmed (or just confirmed) and their grants looked up in the shared store: what is held now decides. */
  | 'grants-looked-up';

/** What the verdict reads besides the request and what it holds: callers' rate limits, project confirmations and area grants. */
export interface Facts {
  readonly gate: Pick<RetryAfterGate, 'blockedMs'>;
  readonly proofs: Pick<CallerProofs, 'isConfirmed' | 'isConfirmedByFill' | 'isGranted'>;
}

const FRESH: Verdict = Object.freeze({ kind: 'fresh' });
const STALE_WHILE_REVALIDATE: Verdict = Object.freeze({ kind: 'stale-while-revalidate' });
const FILL: Verdict = Object.freeze({ kind: 'fill' });
const FILL_FROM_INSTANCE: Verdict = Object.freeze({ kind: 'fill-from-instance' });
const FILL_UNCONFIRMED: Verdict = Object.freeze({ kind: 'fill-unconfirmed' });
const FIND_GRANTS: Verdict = Object.freeze({ kind: 'find-grants' });
const FILL_OWN: Verdict = Object.freeze({ kind: 'fill-own' });

export function judge(d: Decision, found: Found | undefined, now: number, facts: Facts, occasion: Occasion): Verdict {
  if (d.gate === 'member') {
    const unproven = judgeProof(d, found, now, facts, occasion);
    if (unproven !== undefined) return unproven;
  } else if (found !== undefined && occasion !== 'access-confirmed' && needsConfirmation(d, found.entry, now, facts)) {
    // A rate-limited caller is not asked about upstream: unconfirmed, they get the 429, never the entry.
    const blockedMs = facts.gate.blockedMs(d.caller.userId, now);
    if (blockedMs > 0) return { kind: 'rate-limited', blockedMs, stale: undefined };
    const projectId = projectOf(found.entry);
    return projectId === undefined ? FILL_UNCONFIRMED : { kind: 'confirm-access', projectId };
  }
  if (found !== undefined && !d.noCache) {
    if (isFresh(found.entry, now)) return FRESH;
    if (isUsableWhileRevalidating(found.entry, now)) return STALE_WHILE_REVALIDATE;
  }
  const blockedMs = facts.gate.blockedMs(d.caller.userId, now);
  if (blockedMs > 0) return { kind: 'rate-limited', blockedMs, stale: found !== undefined && isUsableOnError(found.entry, now) ? found : undefined };
  return answeredByInstance(d, occasion) ? FILL_FROM_INSTANCE : FILL;
}

/**
 * The three reading conditions of a project's shared answer: undefined when the caller may read
 * it (then judged as any entry), else what proves them or answers without it. Two Map lookups
 * and comparisons on the hit path.
 */
function judgeProof(d: Decision, found: Found | undefined, now: number, facts: Facts, occasion: Occasion): Verdict | undefined {
  // Refused on its confirmation: the instance answers, under the caller's own token.
  if (occasion === 'access-refused') return FILL_OWN;
  const userId = d.caller.userId;
  const confirmed = occasion === 'access-confirmed' || occasion === 'grants-looked-up' || facts.proofs.isConfirmed(userId, d.projectId, now);
  const granted = confirmed && facts.proofs.isGranted(userId, d.projectId, d.areas, now);
  if (granted) return undefined;
  if (found !== undefined && !confirmed) {
    const blockedMs = facts.gate.blockedMs(userId, now);
    if (blockedMs > 0) return { kind: 'rate-limited', blockedMs, stale: undefined };
    return { kind: 'confirm-access', projectId: d.projectId };
  }
  if (found !== undefined && occasion !== 'grants-looked-up') return FIND_GRANTS;
  // Nothing held, or no grant anywhere: the caller's own fill is their proof.
  const blockedMs = facts.gate.blockedMs(userId, now);
  if (blockedMs > 0) return { kind: 'rate-limited', blockedMs, stale: undefined };
  return FILL_OWN;
}

/**
 * The hit path's access check: a user's entry of a project, whose access by that user was not
 * confirmed within `access.projectConfirmMs`; or an entry of projects that cannot be confirmed
 * one by one, stored longer ago than that. A WeakMap and two Map lookups, a comparison.
 */
function needsConfirmation(d: Decision, entry: CacheEntry, now: number, facts: Facts): boolean {
  if (d.gate !== 'project') return false; // shared admin answers are verified by access.ttlMs; GET /user names no project
  const projectId = projectOf(entry);
  if (projectId !== undefined) return !facts.proofs.isConfirmed(d.caller.userId, projectId, now);
  return !facts.proofs.isConfirmedByFill(entry.storedAt, now);
}

/** Must the instance itself answer (no entry another replica stored since the look-up)? For no-cache, and once the look-up was overtaken. */
function answeredByInstance(d: Decision, occasion: Occasion): boolean {
  return d.noCache || occasion === 'stored-earlier' || occasion === 'access-refused';
}
