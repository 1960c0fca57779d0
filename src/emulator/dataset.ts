/**
 * The deterministic dataset: `{seed, scale}` → every resource of the Read API plus the indexes
 * the query engine filters through (per project, per run, per milestone), so no request scans
 * everything. Ids of every kind run from 1 without gaps: `byId(list, id)` is an array access.
 */
import { CONFIGS, FIELD_VALUES, MILESTONE_TYPES, STATES, STATUSES, TAGS, TEMPLATES, makeIssues } from './lookups.js';
import type { AutomationSource, Caller, DatasetOptions, Group, Issue, Milestone, Named, Project, Role, Run, Scale, Session, Status, User } from './model.js';
import { makeCallers, makeGroups, makeMemberships, makeProjects, makeRoles, makeUsers } from './people.js';
import { Prng } from './prng.js';
import { ResultStore } from './results.js';
import { makeMilestones, makeRuns, makeSessions, makeSources, milestonesByProject } from './work.js';

interface Sizes {
  users: number;
  groups: number;
  projects: number;
  milestones: number;
  runs: number;
  sessions: number;
  sources: number;
  issues: number;
}

/** medium ≈ 10× small and large ≈ 100× small for the work; people and projects grow slower. */
const SIZES: Readonly<Record<Scale, Sizes>> = {
  small: { users: 30, groups: 6, projects: 6, milestones: 48, runs: 360, sessions: 60, sources: 24, issues: 40 },
  medium: { users: 120, groups: 12, projects: 20, milestones: 480, runs: 3600, sessions: 600, sources: 240, issues: 400 },
  large: { users: 600, groups: 30, projects: 60, milestones: 4800, runs: 36000, sessions: 6000, sources: 2400, issues: 4000 },
};

export interface ProjectIndex {
  /** Each sorted by created_at ascending (= id order). */
  readonly runs: Run[];
  readonly sessions: Session[];
  readonly milestones: Milestone[];
  readonly sources: AutomationSource[];
}

export interface Dataset {
  readonly seed: number;
  readonly scale: Scale;
  readonly statuses: readonly Status[];
  readonly states: readonly Named[];
  readonly configs: readonly Named[];
  readonly templates: readonly Named[];
  readonly milestoneTypes: readonly Named[];
  readonly fieldValues: readonly Named[];
  readonly tags: readonly string[];
  readonly issues: readonly Issue[];
  readonly users: User[];
  readonly roles: Role[];
  readonly groups: Group[];
  readonly projects: Project[];
  readonly milestones: Milestone[];
  readonly runs: Run[];
  readonly sessions: Session[];
  readonly sources: AutomationSource[];
  readonly results: ResultStore;
  /** user id → accessible project ids (the admin's holds every project). */
  readonly access: Map<number, Set<number>>;
  readonly callers: Caller[];
  /** project id - 1 → that project's items. */
  readonly byProject: ProjectIndex[];
  /** run id - 1 → result indexes sorted by (created_at, id). */
  readonly runResults: number[][];
  /** milestone id - 1 → runs in it. */
  readonly runsByMilestone: Run[][];
}

export function byId<T extends { readonly id: number }>(list: readonly T[], id: number): T | undefined {
  const item = list[id - 1];
  return item?.id === id ? item : undefined;
}

export function generateDataset(opts: DatasetOptions): Dataset {
  const sizes = SIZES[opts.scale];
  const rng = new Prng(opts.seed);
  const roles = makeRoles(rng);
  const users = makeUsers(rng, sizes.users, roles.length);
  const groups = makeGroups(rng, sizes.groups, users);
  const projects = makeProjects(rng, sizes.projects);
  const access = makeMemberships(rng, users, sizes.projects);
  const members = projects.map((p) => users.filter((u) => access.get(u.id)!.has(p.id)).map((u) => u.id));
  const ctx = { rng, projectCount: projects.length, members, issueCount: sizes.issues };
  const milestones = makeMilestones(ctx, sizes.milestones);
  const results = new ResultStore(sizes.runs * 72);
  const runs = makeRuns(ctx, sizes.runs, milestones, results);
  const sessions = makeSessions(ctx, sizes.sessions, milestones);
  const sources = makeSources(ctx, sizes.sources);
  return {
    seed: opts.seed,
    scale: opts.scale,
    statuses: STATUSES,
    states: STATES,
    configs: CONFIGS,
    templates: TEMPLATES,
    milestoneTypes: MILESTONE_TYPES,
    fieldValues: FIELD_VALUES,
    tags: TAGS,
    issues: makeIssues(sizes.issues),
    users,
    roles,
    groups,
    projects,
    milestones,
    runs,
    sessions,
    sources,
    results,
    access,
    callers: makeCallers(opts.seed),
    byProject: indexByProject(projects.length, milestones, runs, sessions, sources),
    runResults: indexResults(runs, results),
    runsByMilestone: groupBy(runs, milestones.length, (r) => r.milestone_id),
  };
}

function groupBy<T>(items: readonly T[], size: number, key: (item: T) => number): T[][] {
  const out: T[][] = Array.from({ length: size }, () => []);
  for (const item of items) out[key(item) - 1]!.push(item);
  return out;
}

function indexByProject(count: number, milestones: Milestone[], runs: Run[], sessions: Session[], sources: AutomationSource[]): ProjectIndex[] {
  const m = milestonesByProject(milestones, count);
  const r = groupBy(runs, count, (x) => x.project_id);
  const s = groupBy(sessions, count, (x) => x.project_id);
  const a = groupBy(sources, count, (x) => x.project_id);
  return m.map((ms, i) => ({ milestones: ms, runs: r[i]!, sessions: s[i]!, sources: a[i]! }));
}

/** Results were pushed run by run in time order, so each run's slice is already sorted. */
function indexResults(runs: readonly Run[], store: ResultStore): number[][] {
  const out: number[][] = runs.map(() => []);
  const runIds = store.column('run_id');
  for (let i = 0; i < store.size; i++) out[runIds[i]! - 1]!.push(i);
  return out;
}

/** Can this user see this project? Site admins see every project. */
export function canAccess(data: Dataset, userId: number, projectId: number): boolean {
  return data.users[userId - 1]?.is_admin === true || data.access.get(userId)?.has(projectId) === true;
}
