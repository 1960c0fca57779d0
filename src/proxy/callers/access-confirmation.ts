/**
 * Project access confirmations: access freshness kept apart from content freshness.
 *
 * A settled answer (a closed run) may stay fresh for an hour, but the user it was cached for
 * may lose its project meanwhile. So an entry that names a project (its `project:<id>` tag) is
 * served to a user only while that user's access to the project has been confirmed upstream
 * within `access.projectConfirmMs`. A confirmation is `user id + project id → confirmed until`,
 * renewed by any fresh 200 of that project for that user (a fill), or by one light request
 * (`GET /api/v1/projects/{id}` with the user's own token) when a hit needs it and it lapsed.
 *
 * Invariants:
 * - The hit path asks `isConfirmed`: two Map lookups and a comparison (plus a WeakMap lookup in
 *   `projectOf`), no allocation, no hashing, no I/O. Only a due confirmation goes async.
 * - Confirmations are coalesced per user and project, and shared through the shared store
 *   (Redis) as one absolute time, so one replica's confirmation serves the others.
 * - "confirmed until" is counted from when the question was asked, never from when the answer
 *   came back: a confirmation never outlives its promise.
 * - A 403/404 forgets the confirmation here and in the shared store; the caller (read-through,
 *   through the access rules) drops the user's entries of that project.
 * - Every answer that reveals anything of a project is gated, whatever its path names. One that
 *   names a single project (its tag: from the path, the body's `project_id`, or the project the
 *   policy learned for a resource in the path, as for a run's results) is gated by that
 *   project's confirmation. One whose projects cannot be confirmed one by one (`GET /projects`
 *   lists many; the results of a run whose project this replica never learned name none) is its
 *   own confirmation: served for `access.projectConfirmMs` from its fill, then asked again.
 * - An answer that is not the API's (a 200 SSO or maintenance page: not JSON) is no verdict,
 *   as for fills and GET /user: the entry is not served on its word.
 */
import { LRUCache } from 'lru-cache';
import type { SharedTierBudget } from '../../cache/budget.js';
import type { CacheEntry } from '../../cache/entry.js';
import type { Scope } from '../../cache/key.js';
import { SharedFill } from '../../cache/shared-fill.js';
import { answerFailure, classifyAnswer } from '../../upstream/answer.js';
import { UPSTREAM_HEADERS, toUpstreamError, type Upstream, type UpstreamError, type UpstreamResponse } from '../../upstream/client.js';
import type { SharedStore } from './identity.js';
import type { Caller } from './caller.js';

export type Confirmation =
  | { readonly kind: 'confirmed' }
  /** The instance did not confirm (401, 403, 404, 429, ...): its answer, for the access rules. */
  | { readonly kind: 'refused'; readonly response: UpstreamResponse }
  /** The instance failed (or tm-cache could not ask it): no verdict. */
  | { readonly kind: 'failed'; readonly error: UpstreamError };

export interface ProjectAccessOptions {
  /** `access.projectConfirmMs` */
  readonly confirmMs: number;
  readonly upstream: Upstream;
  readonly shared?: SharedStore | undefined;
  /**
   * A confirmation's 200 was asked with this credential at `askedAt`: the token was live then, and
   * its identity is renewed from then (identity.ts `renew`), as by any other 200 the instance gives it.
   */
  readonly renewIdentity?: ((authorization: string, caller: Caller, askedAt: number, budget?: SharedTierBudget) => void) | undefined;
  readonly now: () => number;
}

/** Users whose confirmations are remembered at most (the least recently asked about forgotten first, one at a time); forgetting one costs one light request. */
const MAX_USERS = 100_000;
const NAMESPACE = 'project-access';

export class ProjectAccess {
  /** user id → project id → confirmed until (ms since epoch). */
  readonly #byUser = new LRUCache<number, Map<number, number>>({ max: MAX_USERS });
  /**
   * Confirmations in flight, coalesced per user and project (shared-fill.ts). No cross-replica
   * lock: replicas that need one confirmation at the same moment each ask (one light request each);
   * the first one's answer, shared, serves every later look-up.
   */
  readonly #confirming = new SharedFill<never, Confirmation>();

  constructor(private o: ProjectAccessOptions) {}

  /** How long a confirmation lasts (`access.projectConfirmMs`). */
  get confirmMs(): number {
    return this.o.confirmMs;
  }

  /** A new `access.projectConfirmMs` (a reload): confirmations from now on last that long. */
  reconfigure(confirmMs: number): void {
    this.o = { ...this.o, confirmMs };
  }

  /** The hit path: has this user's access to the project been confirmed, and not lapsed, at `now`? */
  isConfirmed(userId: number, projectId: number, now: number): boolean {
    return now < this.confirmedUntil(userId, projectId);
  }

  /** Until when the user's access to the project is confirmed (0: not confirmed here). */
  confirmedUntil(userId: number, projectId: number): number {
    return this.#byUser.get(userId)?.get(projectId) ?? 0;
  }

  /**
   * The hit path, for an answer whose projects cannot be confirmed one by one: the fill that
   * stored it at `storedAt` confirmed them, for `access.projectConfirmMs`. A comparison.
   */
  isConfirmedByFill(storedAt: number, now: number): boolean {
    return now < storedAt + this.o.confirmMs;
  }

  /** A fresh 200 of the project for the user, asked at `askedAt`: confirmed from then on. */
  renew(userId: number, projectId: number, askedAt: number, budget?: SharedTierBudget): void {
    const until = askedAt + this.o.confirmMs;
    const previous = this.#remember(userId, projectId, until);
    // Shared at most twice per window: a burst of fills of one project writes Redis once or twice.
    if (previous === undefined || until - previous > this.o.confirmMs / 2) this.#share(userId, projectId, until, budget);
  }

  /** Confirms through the shared store, else one upstream request; coalesced per user and project. */
  confirm(caller: Caller, authorization: string, projectId: number, budget?: SharedTierBudget): Promise<Confirmation> {
    const key = `${caller.userId}:${projectId}`;
    return this.#confirming.run({
      key,
      budget,
      lookup: () => this.#sharedConfirmation(caller.userId, projectId, key, budget),
      produce: () => this.#ask({ caller, authorization }, projectId, key, budget),
    }).promise;
  }

  /** Did another replica confirm (and share) the user's access to the project? The shared store alone, never the instance. */
  async isConfirmedElsewhere(userId: number, projectId: number, budget?: SharedTierBudget): Promise<boolean> {
    if (this.o.shared === undefined) return false;
    return (await this.#sharedConfirmation(userId, projectId, `${userId}:${projectId}`, budget)) !== undefined;
  }

  /** The confirmation another replica shared, until its own expiry. */
  async #sharedConfirmation(userId: number, projectId: number, key: string, budget: SharedTierBudget | undefined): Promise<Confirmation | undefined> {
    const sharedUntil = await this.o.shared?.getJson<number>(NAMESPACE, key, { budget, isValid: isConfirmedUntil });
    if (typeof sharedUntil !== 'number' || this.o.now() >= sharedUntil) return undefined;
    this.#remember(userId, projectId, sharedUntil);
    return CONFIRMED;
  }

  /** GET /projects/{id} with the user's own credential. */
  async #ask(
    who: { readonly caller: Caller; readonly authorization: string },
    projectId: number,
    key: string,
    budget: SharedTierBudget | undefined,
  ): Promise<Confirmation> {
    const { caller, authorization } = who;
    const userId = caller.userId;
    const askedAt = this.o.now();
    let res: UpstreamResponse;
    try {
      res = await this.o.upstream.get(`/api/v1/projects/${projectId}`, { authorization, ...UPSTREAM_HEADERS }, userId);
    } catch (err) {
      return { kind: 'failed', error: toUpstreamError(err) };
    }
    // Only the API's own answer is a verdict: an SSO or maintenance page (HTML 200) confirms
    // nothing, and a failing instance is no verdict on the user's access (as for GET /user).
    const failure = answerFailure(res);
    if (failure !== undefined) return { kind: 'failed', error: failure };
    const answer = classifyAnswer(res);
    if (answer === 'ok') {
      this.renew(userId, projectId, askedAt, budget);
      // The credential's identity too: a member polling the team's entries, confirmed every
      // projectConfirmMs, then never has a GET /user of their own asked inside a poll.
      this.o.renewIdentity?.(authorization, caller, askedAt, budget);
      return CONFIRMED;
    }
    // The instance hides the project (404) or refuses it (403): the user may not see it.
    if (answer === 'forbidden' || answer === 'not-found') this.#revoke(userId, projectId, key);
    return { kind: 'refused', response: res };
  }

  /**
   * The instance refused the user on the project elsewhere than a confirmation (a shared answer's
   * fill: access-grants.ts): not confirmed any more here, and in the shared store when this
   * replica saw the refusal (`where: 'here'`); another replica's is heard through the bus.
   */
  forget(userId: number, projectId: number, where: 'here' | 'elsewhere'): void {
    if (where === 'here') this.#revoke(userId, projectId, `${userId}:${projectId}`);
    else this.#byUser.get(userId)?.delete(projectId);
  }

  /** Remembers `until` for the pair; answers what was remembered before. */
  #remember(userId: number, projectId: number, until: number): number | undefined {
    let projects = this.#byUser.get(userId);
    if (projects === undefined) {
      this.#byUser.set(userId, (projects = new Map()));
    }
    const previous = projects.get(projectId);
    projects.set(projectId, until);
    return previous;
  }

  #revoke(userId: number, projectId: number, key: string): void {
    this.#byUser.get(userId)?.delete(projectId);
    // 0 rather than a delete: a replica reading it sees "not confirmed" as plainly as a miss.
    void this.o.shared?.setJson(NAMESPACE, key, 0, this.o.confirmMs);
  }

  #share(userId: number, projectId: number, until: number, budget: SharedTierBudget | undefined): void {
    void this.o.shared?.setJson(NAMESPACE, `${userId}:${projectId}`, until, until - this.o.now(), budget);
  }
}

const CONFIRMED: Confirmation = Object.freeze({ kind: 'confirmed' });

/** The project an entry belongs to (its `project:<id>` tag), read once per entry object. */
const projects = new WeakMap<CacheEntry, number | null>();
const PROJECT_TAG = /^project:(\d+)$/;

export function projectOf(entry: CacheEntry): number | undefined {
  let id = projects.get(entry);
  if (id === undefined) projects.set(entry, (id = projectOfTags(entry.tags) ?? null));
  return id ?? undefined;
}

/** The project a list of tags names (`project:<id>`), if any. */
export function projectOfTags(tags: readonly string[]): number | undefined {
  for (const tag of tags) {
    const match = PROJECT_TAG.exec(tag);
    if (match) return Number(match[1]);
  }
  return undefined;
}

/** The tag of one user's entries of one project: what a revoked access drops, in every tier. */
export function userProjectTag(scope: Scope, projectId: number): string {
  return `${scope}|project:${projectId}`;
}

/** What is shared per user and project, checked when read back: an absolute time (0: refused). */
function isConfirmedUntil(value: unknown): boolean {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0;
}
