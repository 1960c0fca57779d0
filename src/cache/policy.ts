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
 */
import type { Operation, ResourceName } from '../api/catalogue.js';
import type { CanonicalRequest } from '../api/normalize.js';
import type { Config, FreshnessRule } from '../config/schema.js';

export interface EntryPolicy {
  readonly ttlMs: number;
  readonly staleWhileRevalidateMs: number;
  readonly staleIfErrorMs: number;
  readonly tags: readonly string[];
}

/** The flag that marks a resource as settled (spec, "States and transitions"). */
const SETTLED_FLAG: Partial<Record<ResourceName, string>> = {
  run: 'is_closed',
  session: 'is_closed',
  milestone: 'is_completed',
  project: 'is_completed',
  automation_source: 'is_retired',
};

/** Path ids that name a resource: the invalidation tag a write to that path drops. */
const ID_TAG: Readonly<Record<string, string>> = {
  project_id: 'project',
  run_id: 'run',
  milestone_id: 'milestone',
  session_id: 'session',
  automation_source_id: 'automation_source',
  user_id: 'user',
  role_id: 'role',
  group_id: 'group',
};

/** Bound of what the policy learns from answers; forgetting only costs a shorter TTL or a wider miss. */
const MAX_REMEMBERED = 100_000;

/** Collections whose lists are tagged by resource name (site-wide lists, not inside a project). */
const COLLECTION_TAGS = new Set<ResourceName>(['project', 'user', 'role', 'group']);

export class FreshnessPolicy {
  /** Runs seen closed (from single-run answers): their results are settled too. */
  private readonly closedRuns = new Set<number>();
  /** Project of each run/session/milestone/source seen, so a write to `/runs/7` can drop its project's lists. */
  private readonly projectOf = new Map<string, number>();

  constructor(private readonly freshness: Config['cache']['freshness'], private readonly staleIfErrorMs: number) {}

  decide(req: CanonicalRequest, body: Buffer): EntryPolicy {
    const op = req.op;
    const tags = tagsFromIds(op, req.ids);
    let settled = false;
    if (op.envelope === 'single') {
      const result = parseResult(body);
      if (result) settled = this.learn(op, result, tags);
    } else if (op.id === 'listRunResults') {
      settled = this.closedRuns.has(req.ids['run_id']!);
    }
    if (op.envelope === 'list' && COLLECTION_TAGS.has(op.resource) && op.pathIds.length === 0) tags.push(op.resource);
    const rule: FreshnessRule = settled
      ? this.freshness.settled
      : (this.freshness.byResource[op.resource] ?? this.freshness.default);
    return {
      ttlMs: rule.ttlMs,
      staleWhileRevalidateMs: rule.staleWhileRevalidateMs,
      staleIfErrorMs: this.staleIfErrorMs,
      tags,
    };
  }

  /** Tags a successful write to `pathname` invalidates: what it names, and the project that holds it. */
  tagsForWrite(pathname: string): string[] {
    const parts = pathname.replace(/^\/api\/v1\//, '').split('/');
    const tags: string[] = [];
    for (let i = 0; i < parts.length; i++) {
      const collection = parts[i] === 'automation' ? `automation/${parts[++i] ?? ''}` : parts[i]!;
      const resource = COLLECTION_RESOURCE[collection];
      if (!resource) continue;
      const id = parts[i + 1];
      if (COLLECTION_TAGS.has(resource)) tags.push(resource);
      if (id !== undefined && /^\d+$/.test(id)) {
        const tag = `${resource}:${id}`;
        tags.push(tag);
        const project = this.projectOf.get(tag);
        if (project !== undefined) tags.push(`project:${project}`);
        i++;
      }
    }
    return [...new Set(tags)];
  }

  private learn(op: Operation, result: Record<string, unknown>, tags: string[]): boolean {
    const projectId = result['project_id'];
    if (typeof projectId === 'number') {
      const tag = `project:${projectId}`;
      if (!tags.includes(tag)) tags.push(tag);
      if (typeof result['id'] === 'number') this.rememberProject(`${op.resource}:${result['id']}`, projectId);
    }
    const flag = SETTLED_FLAG[op.resource];
    const settled = flag !== undefined && result[flag] === true;
    if (op.resource === 'run' && typeof result['id'] === 'number') {
      if (settled && this.closedRuns.size >= MAX_REMEMBERED) this.closedRuns.clear();
      if (settled) this.closedRuns.add(result['id']);
      else this.closedRuns.delete(result['id']);
    }
    return settled;
  }

  private rememberProject(tag: string, projectId: number): void {
    // Bounded: a long-running proxy sees many resources; forgetting one only costs a wider miss.
    if (this.projectOf.size >= MAX_REMEMBERED) this.projectOf.clear();
    this.projectOf.set(tag, projectId);
  }
}

const COLLECTION_RESOURCE: Readonly<Record<string, ResourceName>> = {
  projects: 'project',
  runs: 'run',
  milestones: 'milestone',
  sessions: 'session',
  'automation/sources': 'automation_source',
  users: 'user',
  roles: 'role',
  groups: 'group',
};

function tagsFromIds(op: Operation, ids: Readonly<Record<string, number>>): string[] {
  return op.pathIds.map((name) => `${ID_TAG[name] ?? name}:${ids[name]}`);
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
