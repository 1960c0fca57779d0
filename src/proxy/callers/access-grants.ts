/**
 * Area grants: what lets a member read a project's shared answers (`cache.sharing: project`).
 *
 * An instance grants access per project through roles, so a role may allow some areas of a
 * project (runs, results, milestones, sessions, automation sources, project users) and not
 * others. A shared answer is served to a caller only with proof for every area it reveals: a
 * grant, earned by a 200 from the instance to that same user for an operation of that area on
 * that project, under their own credential, and good for `access.grantTtlMs` from when it was
 * asked. Beside the confirmation of the project itself (access-confirmation.ts), kept the same way:
 *
 * - The hit path asks `isGranted`: an LRU lookup, a Map lookup and one comparison per area of the
 *   answer (a bitmask: `areaMask`), no allocation, no I/O.
 * - Grants are absolute times, in memory and in the shared store (Redis, one value per user,
 *   project and area), so one replica's grant serves on the others; reading one never extends it.
 * - A refusal (401/403/404) to the user on the project drops their grants of it here, in the
 *   shared store (0: refused), and on every replica through the invalidation bus, and no grant
 *   asked before the refusal is taken afterwards (a fill in flight when it came).
 * - Bounded: at most `MAX_USERS` users are remembered (lru-cache); forgetting one costs a fill.
 */
import { LRUCache } from 'lru-cache';
import { AREAS, EXPAND_AREAS, type Area } from '../../api/catalogue.js';
import type { CanonicalRequest } from '../../api/normalize.js';
import type { SharedTierBudget } from '../../cache/budget.js';
import type { InvalidationBus } from '../../cache/invalidation.js';
import type { SharedStore } from './identity.js';

export interface AreaGrantsOptions {
  /** `access.grantTtlMs` */
  readonly ttlMs: number;
  readonly shared?: SharedStore | undefined;
  /** Where refusals are announced to, and heard from, the other replicas. */
  readonly bus?: InvalidationBus | undefined;
  readonly now: () => number;
  /** A refusal heard from another replica (or made here): the confirmation of the project goes too. */
  readonly onRefused?: ((userId: number, projectId: number, where: 'here' | 'elsewhere') => void) | undefined;
}

const MAX_USERS = 100_000;
const NAMESPACE = 'area-grant';
/** The slot after the areas' holds when the user was last refused on the project (ms since epoch). */
const REFUSED_AT = AREAS.length;
const AREA_INDEX: ReadonlyMap<Area, number> = new Map(AREAS.map((area, i) => [area, i]));

/** The bit of one area in an area mask. */
function areaBit(area: Area): number {
  return 1 << AREA_INDEX.get(area)!;
}

/** The area of the request's operation alone, as a mask (0: an operation of no area). */
export function operationAreaMask(req: CanonicalRequest): number {
  return req.op.area === null ? 0 : areaBit(req.op.area);
}

/** The areas an answer reveals, as a mask: its operation's, and those its expands carry. */
export function areaMask(req: CanonicalRequest): number {
  let mask = operationAreaMask(req);
  for (const type of req.expands) {
    const area = EXPAND_AREAS[type];
    if (area !== undefined) mask |= areaBit(area);
  }
  return mask;
}

export class AreaGrants {
  /** user id → project id → granted until per area, then the last refusal (ms since epoch). */
  readonly #byUser = new LRUCache<number, Map<number, Float64Array>>({ max: MAX_USERS });

  constructor(private o: AreaGrantsOptions) {
    o.bus?.onInvalidate((message) => {
      if (message.kind === 'access-refused') this.#drop(message.userId, message.projectId, message.at, 'elsewhere');
      else if (message.kind === 'all') this.#byUser.clear(); // messages may have been missed: prove again
    });
  }

  /** A new `access.grantTtlMs` (a reload): grants earned from now on last that long. */
  /** How long a grant lasts (`access.grantTtlMs`). */
  get ttlMs(): number {
    return this.o.ttlMs;
  }

  reconfigure(ttlMs: number): void {
    this.o = { ...this.o, ttlMs };
  }

  /** The hit path: does the user hold a live grant for every area in `mask` of the project at `now`? */
  isGranted(userId: number, projectId: number, mask: number, now: number): boolean {
    return now < this.grantedUntil(userId, projectId, mask);
  }

  /** Until when the user holds a grant for every area in `mask` of the project: the soonest expiry (0: one is missing; no area: for ever). */
  grantedUntil(userId: number, projectId: number, mask: number): number {
    if (mask === 0) return Infinity;
    const slots = this.#byUser.get(userId)?.get(projectId);
    if (slots === undefined) return 0;
    let until = Infinity;
    for (let i = 0; i < REFUSED_AT; i++) if ((mask & (1 << i)) !== 0 && slots[i]! < until) until = slots[i]!;
    return until;
  }

  /** A 200 from the instance to the user for an operation of `area` on the project, asked at `askedAt`. */
  earn(userId: number, projectId: number, area: Area, askedAt: number, budget?: SharedTierBudget): void {
    const slots = this.#slots(userId, projectId);
    // Asked before a refusal: the refusal is the newer verdict (to the millisecond: one asked in
    // the refusal's own millisecond is taken, as a proof asked right after it would be).
    if (askedAt < slots[REFUSED_AT]!) return;
    const until = askedAt + this.o.ttlMs;
    const i = AREA_INDEX.get(area)!;
    const previous = slots[i]!;
    if (until <= previous) return;
    slots[i] = until;
    // Shared at most twice per window: a burst of fills writes Redis once or twice.
    if (until - previous > this.o.ttlMs / 2) void this.o.shared?.setJson(NAMESPACE, `${userId}:${projectId}:${area}`, until, until - this.o.now(), budget);
  }

  /** The user's grants for the areas in `mask` that this replica lacks, read from the shared store (another replica earned them). */
  async fetchShared(userId: number, projectId: number, mask: number, budget?: SharedTierBudget): Promise<void> {
    const shared = this.o.shared;
    if (shared === undefined) return;
    const now = this.o.now();
    for (let i = 0; i < REFUSED_AT; i++) {
      if ((mask & (1 << i)) === 0 || this.isGranted(userId, projectId, 1 << i, now)) continue;
      const until = await shared.getJson<number>(NAMESPACE, `${userId}:${projectId}:${AREAS[i]!}`, { budget, isValid: isGrantedUntil });
      if (typeof until !== 'number' || !(this.o.now() < until)) return; // one missing area is enough: the caller fills on their own
      const slots = this.#slots(userId, projectId);
      // A grant the shared store still holds from before a refusal this replica heard of is not taken.
      if (until - this.o.ttlMs < slots[REFUSED_AT]!) return;
      if (until > slots[i]!) slots[i] = until;
    }
  }

  /**
   * The instance refused the user (401/403/404) on the project at `at`: their grants of it go,
   * here, in the shared store and on every replica, with their confirmation (`onRefused`).
   */
  refuse(userId: number, projectId: number, at: number): void {
    this.#drop(userId, projectId, at, 'here');
    const shared = this.o.shared;
    // 0 rather than a delete: a replica reading it sees "not granted" as plainly as a miss.
    if (shared !== undefined) for (const area of AREAS) void shared.setJson(NAMESPACE, `${userId}:${projectId}:${area}`, 0, Math.max(this.o.ttlMs, 1));
    void this.o.bus?.publish({ kind: 'access-refused', userId, projectId, at });
  }

  #drop(userId: number, projectId: number, at: number, where: 'here' | 'elsewhere'): void {
    const slots = this.#slots(userId, projectId);
    slots.fill(0, 0, REFUSED_AT);
    if (at > slots[REFUSED_AT]!) slots[REFUSED_AT] = at;
    this.o.onRefused?.(userId, projectId, where);
  }

  #slots(userId: number, projectId: number): Float64Array {
    let projects = this.#byUser.get(userId);
    if (projects === undefined) this.#byUser.set(userId, (projects = new Map()));
    let slots = projects.get(projectId);
    if (slots === undefined) projects.set(projectId, (slots = new Float64Array(REFUSED_AT + 1)));
    return slots;
  }
}

/** What is shared per user, project and area, checked when read back: an absolute time (0: refused). */
function isGrantedUntil(value: unknown): boolean {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0;
}
