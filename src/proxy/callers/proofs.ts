/**
 * What callers have proven of their access, and what each answer proves: the sharing policy in
 * one place, behind one interface (`CallerProofs`), apart from the fill mechanism that consults it
 * (read-through.ts asks it, never the stores below it).
 *
 *   confirmations (access-confirmation.ts)  a user's access to a project, within access.projectConfirmMs
 *   grants (access-grants.ts)               a member's access to an area of a project, within access.grantTtlMs
 *   refreshers (refreshers.ts)              whose credential a shared entry's refresh is asked under
 *   identity renewal (identity.ts)          a 200 to a credential renews its identity
 *   placement (policy.ts, the shared store) which project a run, milestone, session or source belongs to
 *   sharing events (metrics)                what sharing by project did
 *
 * Each act of the read-through is one call here, and the call names the act (`servedFresh`,
 * `answered`, `placed`), not the stores it touches: a new proof is added in this file alone.
 * Nothing here decides a key or a scope (decide.ts does), nor stores an entry (the read-through
 * does); it keeps and renews proofs, and says whether they hold.
 */
import type { CanonicalRequest } from '../../api/normalize.js';
import type { SharedTierBudget } from '../../cache/budget.js';
import type { CacheEntry } from '../../cache/entry.js';
import { projectOf, type Confirmation, type ProjectAccess } from './access-confirmation.js';
import { operationAreaMask, type AreaGrants } from './access-grants.js';
import type { Caller } from './caller.js';
import type { Credential, Refreshers } from './refreshers.js';

/** What the proofs read of a decided request (decide.ts's Decision is one). */
export interface ProvenRequest extends Credential {
  readonly canonical: CanonicalRequest;
  /** `member`: a project's shared answer; `project`: an answer revealing a project, in the caller's own scope. */
  readonly gate: string;
  readonly projectId: number;
  readonly areas: number;
  readonly unplaced: string | undefined;
  /** The request's allowance for waiting on Redis (budget.ts). */
  readonly request: SharedTierBudget;
}

/** What sharing by project did (ops/metrics.ts). */
export interface SharingEvents {
  /** A fresh hit on a project's shared entry; `entry` tells apart the members it served. */
  sharedHit(userId: number, entry: CacheEntry): void;
  /** A member without a grant filled under their own token. */
  grantFill(): void;
  /** A shared entry stored by a fill: `userId`'s credential got it. */
  stored(userId: number, entry: CacheEntry): void;
}

/** The sharing policy as the read-through and the judge (judge.ts) see it. */
export interface CallerProofs {
  /** Is the user's access to the project confirmed at `now`? (A hit asks: no allocation, no I/O.) */
  isConfirmed(userId: number, projectId: number, now: number): boolean;
  /** May an answer whose projects cannot be confirmed one by one, stored at `storedAt`, still be served? */
  isConfirmedByFill(storedAt: number, now: number): boolean;
  /** Does the member hold a grant for every area of `mask` in the project at `now`? */
  isGranted(userId: number, projectId: number, mask: number, now: number): boolean;
  /** Does a member's question reveal an area beyond its operation's own that they hold no grant for? (No 200 to it proves that area.) */
  lacksExpandedGrant(r: ProvenRequest, now: number): boolean;
  /** The caller's access to the project asked of the instance (coalesced, shared between replicas). */
  confirm(r: ProvenRequest, projectId: number): Promise<Confirmation>;
  /** Did another replica confirm the caller's access to the project? The shared store alone (false without one). */
  isConfirmedElsewhere(r: ProvenRequest): Promise<boolean>;
  /** The member's grants another replica earned, looked up in the shared store. */
  findGrants(r: ProvenRequest): Promise<void>;
  /** Asks the shared store once whether another replica learned the project of the resource `r` names; absent: nothing to ask. */
  readonly findPlace?: ((r: ProvenRequest) => Promise<void>) | undefined;
  /** A fresh hit served (`entry`); for a member, who read the team's entry. */
  servedFresh(r: ProvenRequest, entry: CacheEntry, now: number): void;
  /** A stale entry served while it is refreshed. */
  servedStale(r: ProvenRequest, now: number): void;
  /** A member without proof is about to fill under their own token. */
  fillingOwn(): void;
  /**
   * The proof of `r`'s area (its operation's) already under way for this member, by another of
   * their questions: waited for rather than proven again. Undefined when none is.
   */
  provingNow(r: ProvenRequest): Promise<unknown> | undefined;
  /** `proof` (a member's fill under their own token) proves `r`'s area: their other questions of it wait for it. */
  proving(r: ProvenRequest, proof: Promise<unknown>): void;
  /** Does the member lack a grant of `r`'s operation's area, with no proof of it under way? (Then a fill of theirs under their own token may prove it.) */
  mayProve(r: ProvenRequest, now: number): boolean;
  /**
   * A proof of any area of `r`'s project under way for this member: their confirmation of the
   * project comes with it (a 200 of the project's area renews it), so a due confirmation waits for
   * it rather than asking the instance. Undefined when none is.
   */
  provingProject(r: ProvenRequest): Promise<unknown> | undefined;
  /** Whose credential a background refresh of `r`'s entry is asked under: a member whose proof it renews, else the reader's own. */
  refresher(r: ProvenRequest, now: number): Credential;
  /** A refresher chosen above is done with. */
  release(r: ProvenRequest, who: Credential): void;
  /**
   * The instance answered `who`'s request for `r` with the API's 200 at `askedAt`: their identity
   * renewed; with `entry` (storable) the proofs it carries renewed too: the confirmation of its
   * project, the member's grant of the operation's area, a credential refreshes may use.
   * `kept`: the entry is stored (not an answer for one origin relayed alone: origin-keying.ts).
   */
  answered(r: ProvenRequest, who: Credential, askedAt: number, entry: CacheEntry | undefined, kept: boolean, now: number): void;
  /** An answer not placed when decided was stored in its project (`projectId`): the caller's grant of its area, as a member's fill earns it. */
  placed(r: ProvenRequest, projectId: number, askedAt: number, now: number): void;
}

export interface ProofKeeperOptions {
  readonly projects: ProjectAccess;
  readonly grants: AreaGrants;
  /** `cache.sharing: project` only. */
  readonly refreshers?: Refreshers | undefined;
  readonly events?: SharingEvents | undefined;
  /** A JSON 200 to a request asked with a credential at `askedAt`: its identity is renewed from then (identity.ts `renew`). */
  readonly renewIdentity?: ((authorization: string, caller: Caller, askedAt: number, budget?: SharedTierBudget) => void) | undefined;
  /** `cache.sharing: project` with a shared store: the project another replica learned a resource (`run:7`) belongs to. */
  readonly findPlace?: ((tag: string, budget: SharedTierBudget) => Promise<void>) | undefined;
}

/** The proofs over their stores (confirmations, grants, refreshers): the one CallerProofs of a replica. */
export class ProofKeeper implements CallerProofs {
  readonly findPlace: ((r: ProvenRequest) => Promise<void>) | undefined;
  /** Proofs under way, by member, project and area: one each, dropped when settled. */
  readonly #proving = new Map<string, Promise<unknown>>();
  /** The latest proof under way, by member and project (any area): what a due confirmation waits on. */
  readonly #provingProject = new Map<string, Promise<unknown>>();

  constructor(private readonly o: ProofKeeperOptions) {
    const find = o.findPlace;
    this.findPlace = find === undefined ? undefined : (r) => (r.unplaced === undefined ? Promise.resolve() : find(r.unplaced, r.request));
  }

  isConfirmed(userId: number, projectId: number, now: number): boolean {
    return this.o.projects.isConfirmed(userId, projectId, now);
  }

  isConfirmedByFill(storedAt: number, now: number): boolean {
    return this.o.projects.isConfirmedByFill(storedAt, now);
  }

  isGranted(userId: number, projectId: number, mask: number, now: number): boolean {
    return this.o.grants.isGranted(userId, projectId, mask, now);
  }

  lacksExpandedGrant(r: ProvenRequest, now: number): boolean {
    const extra = r.areas & ~operationAreaMask(r.canonical);
    return extra !== 0 && !this.o.grants.isGranted(r.caller.userId, r.projectId, extra, now);
  }

  confirm(r: ProvenRequest, projectId: number): Promise<Confirmation> {
    return this.o.projects.confirm(r.caller, r.authorization, projectId, r.request);
  }

  isConfirmedElsewhere(r: ProvenRequest): Promise<boolean> {
    return this.o.projects.isConfirmedElsewhere(r.caller.userId, r.projectId, r.request);
  }

  findGrants(r: ProvenRequest): Promise<void> {
    return this.o.grants.fetchShared(r.caller.userId, r.projectId, r.areas, r.request);
  }

  servedFresh(r: ProvenRequest, entry: CacheEntry, now: number): void {
    if (r.gate !== 'member') return;
    this.o.events?.sharedHit(r.caller.userId, entry);
    this.o.refreshers?.seen(r.projectId, r.caller, r.authorization, now);
  }

  servedStale(r: ProvenRequest, now: number): void {
    if (r.gate === 'member') this.o.refreshers?.seen(r.projectId, r.caller, r.authorization, now);
  }

  fillingOwn(): void {
    this.o.events?.grantFill();
  }

  provingNow(r: ProvenRequest): Promise<unknown> | undefined {
    return this.#proving.get(provingKey(r));
  }

  proving(r: ProvenRequest, proof: Promise<unknown>): void {
    const key = provingKey(r);
    if (this.#proving.has(key)) return;
    this.#proving.set(key, proof);
    const projectKey = `${r.caller.userId}|${r.projectId}`;
    this.#provingProject.set(projectKey, proof);
    const done = (): void => {
      if (this.#proving.get(key) === proof) this.#proving.delete(key);
      if (this.#provingProject.get(projectKey) === proof) this.#provingProject.delete(projectKey);
    };
    proof.then(done, done);
  }

  mayProve(r: ProvenRequest, now: number): boolean {
    const mask = operationAreaMask(r.canonical);
    return mask !== 0 && !this.o.grants.isGranted(r.caller.userId, r.projectId, mask, now) && !this.#proving.has(provingKey(r));
  }

  provingProject(r: ProvenRequest): Promise<unknown> | undefined {
    return this.#provingProject.get(`${r.caller.userId}|${r.projectId}`);
  }

  refresher(r: ProvenRequest, now: number): Credential {
    if (r.gate !== 'member' || this.o.refreshers === undefined) return r;
    return this.o.refreshers.choose(r.projectId, r.areas, now) ?? r;
  }

  release(r: ProvenRequest, who: Credential): void {
    if (who !== r) this.o.refreshers?.release(who);
  }

  // eslint-disable-next-line max-params -- what one access confirmation learned, as the read-through hands it over (the interface above names each); folding it into the exchange belongs to the callers' own rework
  answered(r: ProvenRequest, who: Credential, askedAt: number, entry: CacheEntry | undefined, kept: boolean, now: number): void {
    const caller = who.caller;
    this.o.renewIdentity?.(who.authorization, caller, askedAt, r.request);
    if (entry === undefined) return;
    // A fresh 200 of a project for this user confirms their access to it (access-confirmation.ts).
    const projectId = r.gate === 'member' ? r.projectId : r.gate === 'project' ? projectOf(entry) : undefined;
    if (projectId !== undefined) this.o.projects.renew(caller.userId, projectId, askedAt, r.request);
    // A project's question (a member's, or one answered from their own key: decide.ts `decideOwn`)
    // answered under their own credential proves the operation's area: the grant (access-grants.ts).
    // Never an area its expands reveal: the instance answers 403 for the operation's area alone.
    if (r.projectId === 0) return;
    const area = r.canonical.op.area;
    if (area !== null) this.o.grants.earn(caller.userId, r.projectId, area, askedAt, r.request);
    if (r.gate !== 'member') return;
    // A member who proved it with their own request: a credential refreshes may be asked under.
    if (who === r) this.o.refreshers?.seen(r.projectId, caller, who.authorization, now);
    if (kept) this.o.events?.stored(caller.userId, entry);
  }

  placed(r: ProvenRequest, projectId: number, askedAt: number, now: number): void {
    const area = r.canonical.op.area;
    if (area !== null) this.o.grants.earn(r.caller.userId, projectId, area, askedAt, r.request);
    this.o.refreshers?.seen(projectId, r.caller, r.authorization, now);
  }
}

/** A member's proof of one area of one project: what their questions of that area wait on. */
function provingKey(r: ProvenRequest): string {
  return `${r.caller.userId}|${r.projectId}|${operationAreaMask(r.canonical)}`;
}
