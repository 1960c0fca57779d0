/**
 * Freshness and invalidation tags of an answer, from its operation and the state of the resource.
 *
 * Resources in a final state change rarely (RFC 9111 §4.2.2 lets a cache choose a heuristic
 * lifetime; ours is per resource state): closed runs and sessions, completed milestones and
 * projects, retired automation sources and the results of a closed run are `settled` and live
 * long. Everything else, and every list, uses the short `default` rule, which `byResource` can
 * override per resource. Beyond freshness, an entry may be served stale while it is revalidated
 * (RFC 5861 §3) and while upstream fails (RFC 5861 §4).
 *
 * Only single-resource answers are parsed (they are small); list bodies are stored as bytes
 * without being read, so a miss costs no JSON parse of a 100-item page.
 *
 * Nothing here names an operation or a resource kind (besides `project`, the container every
 * answer's `project_id` points at): which flag settles a resource, which resource a path id or
 * a write path names, whose settled state a list shares, all come from the catalogue's rows, and
 * write paths are read by the same parser as read paths (src/api/route.ts). Invariant: a write
 * to the path of any cached answer drops at least that answer's path tags.
 */
import { OPERATIONS, RESOURCES, resourceOfIdParam, type Operation, type ResourceName } from '../api/catalogue.js';
import type { CanonicalRequest } from '../api/normalize.js';
import { resourcesInPath } from '../api/route.js';
import type { Config, FreshnessRule } from '../config/schema.js';
import type { SharedTierBudget } from './budget.js';
import { DEFAULT_STORED_HEADERS } from './entry.js';
import { scanPage } from './derive/scan.js';

/** Told of the resources one answer placed in their project (`run:7` → 4), with its fill's budget. */
export type Learned = (learned: readonly (readonly [tag: string, projectId: number])[], budget: SharedTierBudget | undefined) => void;

export interface EntryPolicy {
  readonly ttlMs: number;
  readonly staleWhileRevalidateMs: number;
  readonly staleIfErrorMs: number;
  readonly tags: readonly string[];
}

/** Bound of what the policy learns from answers; forgetting only costs a shorter TTL or a wider miss. */
const MAX_REMEMBERED = 100_000;

/** `/projects`, `/users`, `/roles`, `/groups`: lists not inside any other resource. */
function isSiteWideList(op: Operation): boolean {
  return op.envelope === 'list' && op.pathIds.length === 0;
}

/**
 * Resources with a site-wide list. Such a list is tagged by the resource name, and a write that
 * names the resource drops it: a created, changed or deleted item may enter or leave any page.
 * Lists inside a resource carry that resource's tag instead (`project:4` for its runs).
 */
const LISTED_SITE_WIDE: ReadonlySet<ResourceName> = new Set(OPERATIONS.filter(isSiteWideList).map((op) => op.resource));

/** Resources whose settled state others share (runs, for their results): the policy remembers which it saw settled. */
const SHARES_SETTLED: ReadonlySet<ResourceName> = new Set(Object.values(RESOURCES).flatMap((spec) => (spec.settledWith === null ? [] : [spec.settledWith])));

const PROJECT_TAG_PREFIX = 'project:';

/** The invalidation tag of one resource: `run:7`. */
function tagOf(resource: ResourceName, id: number): string {
  return `${resource}:${id}`;
}

export class FreshnessPolicy {
  /** Per resource in SHARES_SETTLED, the ids seen settled (from single answers). */
  private readonly settledIds = new Map<ResourceName, Set<number>>();
  /** Project of each run/session/milestone/source seen, so a write to `/runs/7` can drop its project's lists. */
  private readonly projectOf = new Map<string, number>();
  /**
   * Told once per answer of the resources whose project it taught (`cache.sharing: project`
   * shares them through Redis, and reads list bodies for them: `learnsFromLists`), with the
   * budget of the request whose fill it was: a page of 25 runs is one write, under that budget.
   */
  private readonly onLearned: Learned | undefined;
  private readonly learnsFromLists: boolean;

  constructor(
    private freshness: Config['cache']['freshness'],
    private staleIfErrorMs: number,
    /** `cache.storedHeaders`: the instance's headers an entry keeps (storable.ts makeEntry); fixed until a restart, as keys follow it. */
    readonly storedHeaders: Config['cache']['storedHeaders'] = DEFAULT_STORED_HEADERS,
    learning: { readonly fromLists: boolean; readonly onLearned?: Learned } = { fromLists: false },
  ) {
    this.onLearned = learning.onLearned;
    this.learnsFromLists = learning.fromLists;
  }

  /** The project the instance said a resource (`run:7`) belongs to, if this replica learned it. A Map lookup. */
  projectOfResource(tag: string): number | undefined {
    return this.projectOf.get(tag);
  }

  /** What another replica learned (through Redis): remembered as if learned here, and not shared again (Redis holds it). */
  learnProject(tag: string, projectId: number): void {
    this.rememberProject(tag, projectId);
  }

  /** New freshness rules (a reload): answers stored from now on follow them; stored ones keep theirs. */
  reconfigure(freshness: Config['cache']['freshness'], staleIfErrorMs: number): void {
    this.freshness = freshness;
    this.staleIfErrorMs = staleIfErrorMs;
  }

  /** `budget`: the allowance of the request whose fill this answer is (budget.ts), for sharing what it taught. */
  decide(req: CanonicalRequest, body: Buffer, budget?: SharedTierBudget): EntryPolicy {
    const op = req.op;
    const tags = op.pathIds.map((name) => tagOf(resourceOfIdParam(name), req.ids[name]!));
    // Collected only when someone is told (sharing by project, with Redis).
    const learned: [string, number][] | undefined = this.onLearned === undefined ? undefined : [];
    let settled = false;
    if (op.envelope === 'single') {
      const result = parseResult(body);
      if (result) settled = this.learn(op, result, tags, learned);
    } else {
      settled = this.settledByParent(op.resource, req.ids);
      if (this.learnsFromLists) this.learnListed(op, body, learned);
    }
    if (learned !== undefined && learned.length > 0) this.onLearned!(learned, budget);
    this.tieToKnownProject(tags);
    if (isSiteWideList(op)) tags.push(op.resource);
    const rule: FreshnessRule = settled ? this.freshness.settled : (this.freshness.byResource[op.resource] ?? this.freshness.default);
    return {
      ttlMs: rule.ttlMs,
      staleWhileRevalidateMs: rule.staleWhileRevalidateMs,
      staleIfErrorMs: this.staleIfErrorMs,
      tags,
    };
  }

  /** Tags a successful write to `pathname` invalidates: what it names, and the project that holds it. */
  tagsForWrite(pathname: string): string[] {
    const tags: string[] = [];
    for (const { resource, id } of resourcesInPath(pathname)) {
      if (LISTED_SITE_WIDE.has(resource)) tags.push(resource);
      if (id === undefined) continue;
      const tag = tagOf(resource, id);
      tags.push(tag);
      const project = this.projectOf.get(tag);
      if (project !== undefined) tags.push(tagOf('project', project));
    }
    return [...new Set(tags)];
  }

  /**
   * An answer reached through a resource whose project was learned (a run's results: their path
   * names the run, their body is not read) reveals that project as much as the resource does: it
   * carries the project's tag too, so a revoked access gates it (access-confirmation.ts) and a
   * write to the project drops it. Left untagged when the project was never learned here.
   */
  private tieToKnownProject(tags: string[]): void {
    if (tags.some((tag) => tag.startsWith(PROJECT_TAG_PREFIX))) return;
    for (const tag of tags) {
      const project = this.projectOf.get(tag);
      if (project !== undefined) {
        tags.push(tagOf('project', project));
        return;
      }
    }
  }

  /** A list of a resource that shares its parent's settled state (a closed run's results), when the parent was seen settled. */
  private settledByParent(resource: ResourceName, ids: Readonly<Record<string, number>>): boolean {
    const parent = RESOURCES[resource].settledWith;
    if (parent === null) return false;
    const idParam = RESOURCES[parent].idParam;
    const id = idParam === null ? undefined : ids[idParam];
    return id !== undefined && this.settledIds.get(parent)?.has(id) === true;
  }

  private learn(op: Operation, result: Record<string, unknown>, tags: string[], learned: [string, number][] | undefined): boolean {
    // Single answers name their project in the body (`project_id`), not in the path: tag the entry
    // with it so a write to the project drops it, and remember it for writes to this resource.
    const projectId = result['project_id'];
    if (typeof projectId === 'number') {
      const tag = tagOf('project', projectId);
      if (!tags.includes(tag)) tags.push(tag);
      if (typeof result['id'] === 'number') this.rememberProject(tagOf(op.resource, result['id']), projectId, learned);
    }
    const flag = RESOURCES[op.resource].settledFlag;
    const settled = flag !== null && result[flag] === true;
    if (SHARES_SETTLED.has(op.resource) && typeof result['id'] === 'number') this.rememberSettled(op.resource, result['id'], settled);
    return settled;
  }

  private rememberSettled(resource: ResourceName, id: number, settled: boolean): void {
    let ids = this.settledIds.get(resource);
    if (ids === undefined) this.settledIds.set(resource, (ids = new Set()));
    if (!settled) {
      ids.delete(id); // reopened: its children change again
      return;
    }
    if (ids.size >= MAX_REMEMBERED) ids.clear();
    ids.add(id);
  }

  /** Remembers a resource's project; `learned` collects it when it is news to share (not what another replica shared). */
  private rememberProject(tag: string, projectId: number, learned?: [string, number][]): void {
    const known = this.projectOf.get(tag);
    if (known === projectId) return;
    // Bounded: a long-running proxy sees many resources; forgetting one only costs a wider miss.
    if (this.projectOf.size >= MAX_REMEMBERED) this.projectOf.clear();
    this.projectOf.set(tag, projectId);
    learned?.push([tag, projectId]);
  }

  /**
   * The items of a list of resources a path can name (a project's runs, milestones, sessions,
   * sources) name their project: each is remembered, so that a later `/runs/{id}` is placed in
   * its project's shared scope. Only when sharing by project; read by the scan of the derivation
   * index (derive/scan.ts), whose result the index then reuses: no parse of the page.
   */
  private learnListed(op: Operation, body: Buffer, learned: [string, number][] | undefined): void {
    if (RESOURCES[op.resource].idParam === null) return;
    const items = scanPage(body);
    if (items === undefined) return;
    const { ids, projects } = items;
    for (let i = 0; i < ids.length; i++) {
      const projectId = projects[i];
      if (projectId !== undefined) this.rememberProject(tagOf(op.resource, ids[i]!), projectId, learned);
    }
  }
}

function parseResult(body: Buffer): Record<string, unknown> | undefined {
  try {
    const parsed = JSON.parse(body.toString('utf8')) as { result?: unknown };
    const result = parsed.result;
    return result !== null && typeof result === 'object' ? (result as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The most an entry of one operation may claim when read back from a shared store: what this
 * configuration would give it at most (every freshness rule that can apply to the operation),
 * and the tags its key alone implies. A value read back claims what its writer decided; a writer
 * under other settings (a rollout), or anyone who could forge a value, must not make a reader
 * serve longer than the reader's own settings allow, nor escape the invalidations its key names.
 */
export interface ClaimLimits {
  readonly maxTtlMs: number;
  readonly maxStaleWhileRevalidateMs: number;
  readonly staleIfErrorMs: number;
  /** Tags every entry under this key carries (its path ids, its site-wide list). */
  readonly keyTags: readonly string[];
}

const OPERATION_BY_ID: ReadonlyMap<string, Operation> = new Map(OPERATIONS.map((op) => [op.id, op]));

/** `claimLimitsOf(freshness, staleIfErrorMs)(key)`: the limits for a cache key (`<scope>|<version>|<op>|<ids>|<query>`). */
export function claimLimitsOf(freshness: Config['cache']['freshness'], staleIfErrorMs: number): (key: string) => ClaimLimits {
  const allRules = [freshness.default, freshness.settled, ...Object.values(freshness.byResource)].filter((r): r is FreshnessRule => r !== undefined);
  const longest = (rules: readonly FreshnessRule[]) => ({
    maxTtlMs: Math.max(...rules.map((r) => r.ttlMs)),
    maxStaleWhileRevalidateMs: Math.max(...rules.map((r) => r.staleWhileRevalidateMs)),
  });
  const byOperation = new Map(OPERATIONS.map((op) => [op.id, longest(rulesFor(op, freshness))]));
  const anyOperation = longest(allRules);
  // Asked on every Redis-tier hit, for the same few keys again and again: made once per key (a
  // split, a spread and the key's tags each time cost a Redis hit more than its MAC check). The
  // limits follow from the key and this configuration alone; a reload makes a new memo.
  const made = new Map<string, ClaimLimits>();
  return (key) => {
    let limits = made.get(key);
    if (limits !== undefined) return limits;
    const [, , operationId = '', ids = ''] = key.split('|', 4);
    const op = OPERATION_BY_ID.get(operationId);
    limits = { ...(op ? byOperation.get(op.id)! : anyOperation), staleIfErrorMs, keyTags: op ? keyTagsOf(op, ids) : [] };
    // Bounded: past MAX_CLAIM_MEMO_KEYS the oldest key goes (a Map iterates in insertion order).
    if (made.size >= MAX_CLAIM_MEMO_KEYS) made.delete(made.keys().next().value!);
    made.set(key, limits);
    return limits;
  };
}

/** Keys whose claim limits are kept made (a few hundred bytes each). */
const MAX_CLAIM_MEMO_KEYS = 10_000;

/**
 * Every rule `decide` may choose for an operation: its resource's own (or the default), and
 * `settled` when its answers can be settled (a single answer by its flag, a list by its parent).
 */
function rulesFor(op: Operation, freshness: Config['cache']['freshness']): FreshnessRule[] {
  const spec = RESOURCES[op.resource];
  const own = freshness.byResource[op.resource] ?? freshness.default;
  const canSettle = op.envelope === 'single' ? spec.settledFlag !== null : spec.settledWith !== null;
  return canSettle ? [own, freshness.settled] : [own];
}

/** The tags `decide` gives every answer of `op` with these path ids (comma-joined, as in the key). */
function keyTagsOf(op: Operation, ids: string): string[] {
  const values = ids === '' ? [] : ids.split(',').map(Number);
  if (values.length !== op.pathIds.length || !values.every(Number.isSafeInteger)) return [];
  const tags = op.pathIds.map((name, i) => tagOf(resourceOfIdParam(name), values[i]!));
  if (isSiteWideList(op)) tags.push(op.resource);
  return tags;
}
