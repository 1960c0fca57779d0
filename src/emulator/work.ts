/**
 * The work inside projects: milestones (a root/parent hierarchy), runs with their tests and
 * results, sessions and automation sources. Each kind is generated in creation order, so ids
 * grow with created_at and the per-project arrays built from them are already sorted by it.
 */
import { AUTOMATION_TAGS, CONFIGS, FIELD_VALUES, MILESTONE_TYPES, NOTES, RESULT_STATUS_WEIGHTS, STATES, TAGS, TEMPLATES } from './lookups.js';
import { COUNTER_SLOTS, DATASET_NOW_MS, HISTORY_MS, type AutomationSource, type Milestone, type Run, type Session } from './model.js';
import type { Prng } from './prng.js';
import { type ResultStore } from './results.js';

const HOUR_MS = 3600 * 1000;
const DAY_MS = 24 * HOUR_MS;
const START_MS = DATASET_NOW_MS - HISTORY_MS;

export interface WorkContext {
  readonly rng: Prng;
  readonly projectCount: number;
  /** Project id - 1 → ids of users who can access it (never empty: the admin is everywhere). */
  readonly members: readonly (readonly number[])[];
  readonly issueCount: number;
}

/** i-th of n creation times, increasing, spread over the history with jitter. */
function creationTime(ctx: WorkContext, i: number, n: number): number {
  return START_MS + Math.floor(((i + ctx.rng.next()) * HISTORY_MS) / n);
}

/**
 * Twice the projects in turn (so each project has at least two of everything), then a skewed
 * draw: project 1 is the busiest, as in real instances.
 */
function pickProject(ctx: WorkContext, i: number): number {
  if (i < 2 * ctx.projectCount) return (i % ctx.projectCount) + 1;
  const weights = Array.from({ length: ctx.projectCount }, (_, k) => 1 / Math.sqrt(k + 1));
  return ctx.rng.weighted(weights) + 1;
}

function member(ctx: WorkContext, projectId: number): number {
  return ctx.rng.pick(ctx.members[projectId - 1]!);
}

function issueRefs(ctx: WorkContext, p: number): number[] {
  if (!ctx.rng.chance(p)) return [];
  const a = ctx.rng.int(1, ctx.issueCount);
  const b = ctx.rng.int(1, ctx.issueCount);
  return a === b || ctx.rng.chance(0.5) ? [a] : [Math.min(a, b), Math.max(a, b)];
}

/** updated_at/by: absent for some items, else between `from` and `to`. */
function updateStamp(ctx: WorkContext, projectId: number, from: number, to: number) {
  if (ctx.rng.chance(0.15)) return { updated_at: null, updated_by: null };
  return { updated_at: from + Math.floor(ctx.rng.next() * Math.max(1, to - from)), updated_by: member(ctx, projectId) };
}

export function makeMilestones(ctx: WorkContext, count: number): Milestone[] {
  const out: Milestone[] = [];
  const byProject: Milestone[][] = Array.from({ length: ctx.projectCount }, () => []);
  for (let i = 0; i < count; i++) {
    const project_id = pickProject(ctx, i);
    const created_at = creationTime(ctx, i, count);
    const candidates = byProject[project_id - 1]!.filter((m) => m.parent_id === null || m.root_id === m.parent_id);
    const parent = candidates.length > 0 && ctx.rng.chance(0.6) ? ctx.rng.pick(candidates) : undefined;
    const is_completed = ctx.rng.chance(0.2 + (0.6 * (DATASET_NOW_MS - created_at)) / HISTORY_MS);
    const completed_at = is_completed ? Math.min(DATASET_NOW_MS - HOUR_MS, created_at + ctx.rng.int(DAY_MS, 90 * DAY_MS)) : null;
    const m: Milestone = {
      id: i + 1,
      project_id,
      root_id: parent ? (parent.root_id ?? parent.id) : null,
      parent_id: parent?.id ?? null,
      name: `${ctx.rng.pick(MILESTONE_TYPES).name} ${i + 1}`,
      type_id: ctx.rng.pick(MILESTONE_TYPES).id,
      automation_tags: ctx.rng.subset(AUTOMATION_TAGS, 2, 0.4),
      issues: issueRefs(ctx, 0.2),
      is_completed,
      completed_at,
      created_at,
      created_by: member(ctx, project_id),
      ...updateStamp(ctx, project_id, created_at, completed_at ?? DATASET_NOW_MS),
    };
    // Completing is the last change a completed milestone saw.
    if (completed_at !== null) Object.assign(m, { updated_at: completed_at, updated_by: m.created_by });
    out.push(m);
    byProject[project_id - 1]!.push(m);
  }
  return out;
}

interface Closing {
  is_closed: boolean;
  closed_at: number | null;
  closed_by: number | null;
}

/** Older runs and sessions are more likely closed. */
function closing(ctx: WorkContext, projectId: number, created_at: number): Closing {
  const age = (DATASET_NOW_MS - created_at) / HISTORY_MS;
  if (!ctx.rng.chance(0.2 + 0.7 * age)) return { is_closed: false, closed_at: null, closed_by: null };
  const closed_at = Math.min(DATASET_NOW_MS - HOUR_MS, created_at + ctx.rng.int(HOUR_MS, 30 * DAY_MS));
  return { is_closed: true, closed_at, closed_by: member(ctx, projectId) };
}

function milestoneFor(ctx: WorkContext, byProject: readonly (readonly Milestone[])[], projectId: number): number {
  return ctx.rng.pick(byProject[projectId - 1]!).id;
}

export function milestonesByProject(milestones: readonly Milestone[], projectCount: number): Milestone[][] {
  const out: Milestone[][] = Array.from({ length: projectCount }, () => []);
  for (const m of milestones) out[m.project_id - 1]!.push(m);
  return out;
}

export function makeRuns(ctx: WorkContext, count: number, milestones: readonly Milestone[], store: ResultStore): Run[] {
  const byProject = milestonesByProject(milestones, ctx.projectCount);
  const runs: Run[] = [];
  let nextTestId = 1;
  for (let i = 0; i < count; i++) {
    const project_id = pickProject(ctx, i);
    const created_at = creationTime(ctx, i, count);
    const close = closing(ctx, project_id, created_at);
    const tests = ctx.rng.int(16, 36);
    const run: Run = {
      id: i + 1,
      project_id,
      name: `Run ${i + 1}: ${ctx.rng.pick(TAGS)} ${ctx.rng.pick(CONFIGS).name}`,
      config_id: ctx.rng.pick(CONFIGS).id,
      milestone_id: milestoneFor(ctx, byProject, project_id),
      state_id: ctx.rng.pick(STATES).id,
      tags: ctx.rng.subset(TAGS, 3, 0.7),
      issues: issueRefs(ctx, 0.3),
      ...close,
      counts: new Int32Array(COUNTER_SLOTS),
      testIds: Int32Array.from({ length: tests }, () => nextTestId++),
      caseIds: Int32Array.from({ length: tests }, () => ctx.rng.int(1, 50_000)),
      latest: new Int32Array(tests).fill(-1),
      created_at,
      created_by: member(ctx, project_id),
      ...updateStamp(ctx, project_id, created_at, DATASET_NOW_MS),
    };
    if (close.closed_at !== null) Object.assign(run, { updated_at: close.closed_at, updated_by: close.closed_by });
    addResults(ctx, run, store);
    runs.push(run);
  }
  return runs;
}

/** 1–5 results per tested test, in time order; the last one not deleted is the latest. */
function addResults(ctx: WorkContext, run: Run, store: ResultStore): void {
  const end = run.closed_at ?? DATASET_NOW_MS;
  const draws: { test: number; at: number }[] = [];
  for (let t = 0; t < run.testIds.length; t++) {
    if (ctx.rng.chance(run.is_closed ? 0.08 : 0.25)) continue; // untested
    const k = ctx.rng.int(1, 5);
    for (let j = 0; j < k; j++) draws.push({ test: t, at: run.created_at + Math.floor(ctx.rng.next() * (end - run.created_at)) });
  }
  draws.sort((a, b) => a.at - b.at || a.test - b.test);
  const lastDraw = new Map<number, number>();
  draws.forEach((d, j) => lastDraw.set(d.test, j));
  draws.forEach((d, j) => {
    const isLast = lastDraw.get(d.test) === j;
    const deleted = !isLast && ctx.rng.chance(0.03);
    const updated = ctx.rng.chance(0.2);
    const index = store.push({
      project_id: run.project_id,
      run_id: run.id,
      test_id: run.testIds[d.test]!,
      case_id: run.caseIds[d.test]!,
      status_id: ctx.rng.weighted(RESULT_STATUS_WEIGHTS) + 1,
      note: ctx.rng.int(0, NOTES.length - 1),
      elapsed: ctx.rng.int(1, 900),
      assignee_id: ctx.rng.chance(0.3) ? null : member(ctx, run.project_id),
      is_latest: isLast,
      issue_id: ctx.rng.chance(0.05) ? ctx.rng.int(1, ctx.issueCount) : null,
      created_at: d.at,
      created_by: member(ctx, run.project_id),
      updated_at: updated ? d.at + ctx.rng.int(60_000, 2 * HOUR_MS) : null,
      updated_by: updated ? member(ctx, run.project_id) : null,
      deleted_at: deleted ? d.at + ctx.rng.int(60_000, HOUR_MS) : null,
      deleted_by: deleted ? member(ctx, run.project_id) : null,
    });
    if (isLast) run.latest[d.test] = index;
  });
  for (let t = 0; t < run.testIds.length; t++) {
    const latest = run.latest[t]!;
    run.counts[latest < 0 ? 0 : store.int('status_id', latest) - 1]!++;
  }
}

export function makeSessions(ctx: WorkContext, count: number, milestones: readonly Milestone[]): Session[] {
  const byProject = milestonesByProject(milestones, ctx.projectCount);
  const sessions: Session[] = [];
  for (let i = 0; i < count; i++) {
    const project_id = pickProject(ctx, i);
    const created_at = creationTime(ctx, i, count);
    const close = closing(ctx, project_id, created_at);
    const counts = new Int32Array(COUNTER_SLOTS);
    const total = ctx.rng.int(3, 40);
    for (let t = 0; t < total; t++) counts[ctx.rng.chance(close.is_closed ? 0.05 : 0.4) ? 0 : ctx.rng.weighted(RESULT_STATUS_WEIGHTS)]!++;
    const s: Session = {
      id: i + 1,
      project_id,
      name: `Session ${i + 1}: ${ctx.rng.pick(TAGS)}`,
      config_id: ctx.rng.pick(CONFIGS).id,
      milestone_id: milestoneFor(ctx, byProject, project_id),
      state_id: ctx.rng.pick(STATES).id,
      template_id: ctx.rng.pick(TEMPLATES).id,
      assignee_id: ctx.rng.chance(0.25) ? null : member(ctx, project_id),
      tags: ctx.rng.subset(TAGS, 3, 0.7),
      issues: issueRefs(ctx, 0.3),
      field_values: ctx.rng.subset(
        FIELD_VALUES.map((f) => f.id),
        3,
        0.6,
      ),
      ...close,
      counts,
      created_at,
      created_by: member(ctx, project_id),
      ...updateStamp(ctx, project_id, created_at, DATASET_NOW_MS),
    };
    if (close.closed_at !== null) Object.assign(s, { updated_at: close.closed_at, updated_by: close.closed_by });
    sessions.push(s);
  }
  return sessions;
}

export function makeSources(ctx: WorkContext, count: number): AutomationSource[] {
  const out: AutomationSource[] = [];
  for (let i = 0; i < count; i++) {
    const project_id = pickProject(ctx, i);
    const created_at = creationTime(ctx, i, count);
    // The first round of sources is active and the second retired: every project has both.
    const round = Math.floor(i / ctx.projectCount);
    const is_retired = round === 0 ? false : round === 1 ? true : ctx.rng.chance(0.25);
    const retired_at = is_retired ? Math.min(DATASET_NOW_MS - HOUR_MS, created_at + ctx.rng.int(DAY_MS, 200 * DAY_MS)) : null;
    out.push({
      id: i + 1,
      project_id,
      name: `${ctx.rng.pick(['jest', 'pytest', 'junit', 'playwright', 'cypress'])}-${i + 1}`,
      status: ctx.rng.int(1, 3),
      is_retired,
      run_count: ctx.rng.int(1, 2000),
      test_count_average: ctx.rng.int(5, 4000),
      elapsed_average: ctx.rng.int(10, 7200),
      ran_at: created_at + Math.floor(ctx.rng.next() * ((retired_at ?? DATASET_NOW_MS) - created_at)),
      retired_at,
      retired_by: is_retired ? member(ctx, project_id) : null,
      created_at,
      created_by: member(ctx, project_id),
      ...updateStamp(ctx, project_id, created_at, retired_at ?? DATASET_NOW_MS),
    });
    const source = out[out.length - 1]!;
    if (retired_at !== null) Object.assign(source, { updated_at: retired_at, updated_by: source.retired_by });
  }
  return out;
}
