/**
 * Whose credential a project's shared entry is refreshed under (`cache.sharing: project`).
 *
 * A shared entry's refresh goes upstream under some member's credential, and its 200 renews that
 * member's proofs (their confirmation of the project, their grant for the operation's area, their
 * identity: read-through.ts). So a background refresh (stale-while-revalidate, refresh-ahead) is
 * asked under the member it saves the most (a grant about to lapse, a confirmation due soonest:
 * `choose`), among those who may read the entry right now, rather than under whoever happened to
 * read it: the team's proofs are then renewed by the refreshes the team needs anyway, and cost
 * no request of their own.
 *
 * A member may be chosen only while all of this holds at the choice:
 * - they read a shared answer of the project on this replica within `identity.ttlMs` (seen);
 * - their identity is live: this replica's memo still maps that credential to them, verified;
 * - their access to the project is confirmed, and they hold a grant for every area the entry
 *   reveals (no refusal since: a refusal drops both, and drops them from here);
 * so a refresh is never asked under a credential that could not read the entry as a hit.
 *
 * Credentials kept here live only in this process's memory, as the identity memo's do: never in
 * Redis, never in a log line or a metric. Bounded: `MAX_PROJECTS` projects (least recently seen
 * forgotten first), `MAX_MEMBERS` members per project (the least recently seen replaced).
 *
 * The hit path calls `seen`: an LRU lookup, a Map lookup and a write, no allocation once the
 * member is known.
 */
import { LRUCache } from 'lru-cache';
import type { Caller } from './caller.js';

/** A credential a request may be asked under: whose it is, and the Authorization header as the member sent it. */
export interface Credential {
  readonly caller: Caller;
  readonly authorization: string;
}

/** One member seen reading a project's shared answers: their credential, when last seen, refreshes under way. */
interface Member extends Credential {
  seenAt: number;
  /** Refreshes under this credential in flight: another member is preferred meanwhile. */
  pending: number;
}

/** What the choice reads of each member's proofs: absolute expiries, 0 or less when none is live. */
export interface Proofs {
  /** Is the credential still this caller's, verified at `now` (identity memo)? */
  isLive(credential: Credential, now: number): boolean;
  /** Until when the member's access to the project is confirmed (0: not). */
  confirmedUntil(userId: number, projectId: number): number;
  /** Until when the member holds a grant for every area in `mask` (the soonest of them; 0: one is missing). */
  grantedUntil(userId: number, projectId: number, mask: number): number;
}

export interface RefreshersOptions {
  readonly proofs: Proofs;
  /** How long after their last read a member's credential may still be chosen (`identity.ttlMs`). */
  readonly seenWithinMs: () => number;
  /** How long a confirmation of the project lasts (`access.projectConfirmMs`). */
  readonly confirmMs: () => number;
  /** How long a grant for an area lasts (`access.grantTtlMs`). */
  readonly grantTtlMs: () => number;
}

const MAX_PROJECTS = 10_000;
const MAX_MEMBERS = 64;

export class Refreshers {
  /** project id → user id → member (last seen credential of that user). */
  readonly #byProject = new LRUCache<number, Map<number, Member>>({ max: MAX_PROJECTS });

  constructor(private readonly o: RefreshersOptions) {}

  /** The hit path: a member who may read the project's shared answers read one at `now`, with this credential. */
  seen(projectId: number, caller: Caller, authorization: string, now: number): void {
    let members = this.#byProject.get(projectId);
    const known = members?.get(caller.userId);
    if (known !== undefined && known.caller === caller && known.authorization === authorization) {
      known.seenAt = now;
      return;
    }
    if (members === undefined) this.#byProject.set(projectId, (members = new Map()));
    if (known === undefined && members.size >= MAX_MEMBERS) evictLeastRecentlySeen(members);
    members.set(caller.userId, { caller, authorization, seenAt: now, pending: known?.pending ?? 0 });
  }

  /** The member was refused on the project (401/403/404, here or on another replica): their credential is not chosen for it again. */
  drop(userId: number, projectId: number): void {
    this.#byProject.get(projectId)?.delete(userId);
  }

  /**
   * The credential a refresh of a shared entry of `projectId` revealing the areas in `mask` is
   * asked under at `now`: the member who may read it for whom it saves the most requests, one
   * without a refresh under way preferred; undefined when nobody qualifies (the caller then uses
   * the reader's own). `release` must be called with the answer once the refresh is over.
   *
   * What a refresh's 200 saves a member, counted in requests of their own it spares them: the
   * part of a proof they would otherwise ask for themselves that it renews early, for each of
   * - their grant for the refreshed areas (a proof of that area once it lapses): all of one when
   *   it lapses now, nothing when just earned;
   * - their confirmation of the project, or their identity, which it renews too (a
   *   `GET /projects/{id}` of theirs once the sooner lapses): likewise over `projectConfirmMs`.
   * Confirmations alone (the soonest first) would leave grants to chance: a team's grants, earned
   * together at its first load, would lapse together, and each area is refreshed about as often
   * as a team of ten needs its grants renewed one by one.
   */
  choose(projectId: number, mask: number, now: number): Credential | undefined {
    const members = this.#byProject.get(projectId);
    if (members === undefined) return undefined;
    const proofs = this.o.proofs;
    const seenSince = now - this.o.seenWithinMs();
    const confirmMs = Math.max(1, this.o.confirmMs());
    const grantMs = Math.max(1, this.o.grantTtlMs());
    let best: Member | undefined;
    let bestScore = -Infinity;
    for (const m of members.values()) {
      if (m.seenAt < seenSince || !proofs.isLive(m, now)) continue;
      const confirmed = proofs.confirmedUntil(m.caller.userId, projectId);
      if (!(now < confirmed)) continue;
      const granted = mask === 0 ? Infinity : proofs.grantedUntil(m.caller.userId, projectId, mask);
      if (!(now < granted)) continue;
      const grantSaved = mask === 0 ? 0 : 1 - Math.min(1, (granted - now) / grantMs);
      const confirmationSaved = 1 - Math.min(1, (Math.min(confirmed, m.caller.verifiedUntil) - now) / confirmMs);
      // A member with a refresh under way is renewed by it: ranked after every member without one.
      const score = grantSaved + confirmationSaved - (m.pending > 0 ? PENDING_PENALTY : 0);
      if (score > bestScore) [best, bestScore] = [m, score];
    }
    if (best !== undefined) best.pending++;
    return best;
  }

  /** A refresh asked under `chosen` (from `choose`) is over. */
  release(chosen: Credential): void {
    const member = chosen as Member;
    if (member.pending > 0) member.pending--;
  }
}

/** More than any refresh saves (at most 2): a member with a refresh pending ranks after all others. */
const PENDING_PENALTY = 10;

function evictLeastRecentlySeen(members: Map<number, Member>): void {
  let oldest: number | undefined;
  let oldestAt = Infinity;
  for (const [userId, m] of members) {
    if (m.seenAt < oldestAt) [oldest, oldestAt] = [userId, m.seenAt];
  }
  if (oldest !== undefined) members.delete(oldest);
}
