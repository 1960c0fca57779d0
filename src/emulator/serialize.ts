/**
 * Resources → JSON text, fields in the spec's order. Item JSON of runs, sessions, milestones,
 * projects and the rest is memoized: a page is then a join of ready strings, which keeps a
 * 100-item page far below a millisecond. Mutations call `forget` for what they changed.
 * Results are not memoized (millions of them); they are built from the columns on demand.
 */
import type { Dataset } from './dataset.js';
import { NOTES } from './lookups.js';
import {
  COUNTER_SLOTS,
  type AutomationSource,
  type Closable,
  type Group,
  type Milestone,
  type Project,
  type Role,
  type Run,
  type Session,
  type User,
} from './model.js';

const iso = (ms: number | null): string | null => (ms === null ? null : new Date(ms).toISOString());

/** Resource kinds, plus `x:<expand type>` for expand objects. */
export type MemoKind = 'user' | 'project' | 'run' | 'session' | 'milestone' | 'source' | 'role' | 'group' | `x:${string}`;

export class JsonMemo {
  private readonly maps = new Map<MemoKind, Map<number, string>>();

  get(kind: MemoKind, id: number, build: () => unknown): string {
    let map = this.maps.get(kind);
    if (!map) this.maps.set(kind, (map = new Map()));
    let json = map.get(id);
    if (json === undefined) map.set(id, (json = JSON.stringify(build())));
    return json;
  }

  forget(kind: MemoKind, id: number): void {
    this.maps.get(kind)?.delete(id);
  }
}

const stamps = (x: { created_at: number; created_by: number | null; updated_at: number | null; updated_by: number | null }) => ({
  created_at: iso(x.created_at),
  created_by: x.created_by,
  updated_at: iso(x.updated_at),
  updated_by: x.updated_by,
});

export function currentUserObject(u: User) {
  return { id: u.id, name: u.name, timezone: u.timezone, date_format: u.date_format, time_format: u.time_format };
}

export function userObject(u: User) {
  return {
    id: u.id,
    name: u.name,
    email: u.email,
    type: u.type,
    timezone: u.timezone,
    date_format: u.date_format,
    time_format: u.time_format,
    role_id: u.role_id,
    groups: u.groups,
    ...stamps(u),
  };
}

export function projectObject(data: Dataset, p: Project) {
  const ms = data.byProject[p.id - 1]!.milestones;
  let completed = 0;
  for (const m of ms) if (m.is_completed) completed++;
  return {
    id: p.id,
    name: p.name,
    note: p.note,
    is_completed: p.is_completed,
    milestone_count: ms.length,
    milestone_active_count: ms.length - completed,
    milestone_completed_count: completed,
    ...stamps(p),
    completed_at: iso(p.completed_at),
  };
}

/** untested + status1..24, then success/failure/completed/total derived from the status flags. */
export function counterFields(data: Dataset, counts: Int32Array): Record<string, number> {
  const out: Record<string, number> = { untested_count: counts[0]! };
  let success = 0,
    failure = 0,
    total = counts[0]!;
  for (let k = 1; k < COUNTER_SLOTS; k++) {
    const n = counts[k]!;
    out[`status${k}_count`] = n;
    total += n;
    const status = data.statuses[k]; // status id k + 1
    if (status?.is_success) success += n;
    if (status?.is_failure) failure += n;
  }
  // completed: every test that has a result, whatever its status; untested is the rest.
  Object.assign(out, { success_count: success, failure_count: failure, completed_count: total - counts[0]!, total_count: total });
  return out;
}

function closableHead(c: Closable) {
  return { id: c.id, project_id: c.project_id, name: c.name, config_id: c.config_id, milestone_id: c.milestone_id, state_id: c.state_id };
}
function closableTail(data: Dataset, c: Closable) {
  return {
    is_closed: c.is_closed,
    ...counterFields(data, c.counts),
    ...stamps(c),
    closed_at: iso(c.closed_at),
    closed_by: c.closed_by,
  };
}

export function runObject(data: Dataset, r: Run) {
  return { ...closableHead(r), tags: r.tags, issues: r.issues, ...closableTail(data, r) };
}

export function sessionObject(data: Dataset, s: Session) {
  return {
    ...closableHead(s),
    template_id: s.template_id,
    assignee_id: s.assignee_id,
    tags: s.tags,
    issues: s.issues,
    field_values: s.field_values,
    ...closableTail(data, s),
  };
}

export function milestoneObject(m: Milestone) {
  return {
    id: m.id,
    project_id: m.project_id,
    root_id: m.root_id,
    parent_id: m.parent_id,
    name: m.name,
    type_id: m.type_id,
    automation_tags: m.automation_tags,
    issues: m.issues,
    is_completed: m.is_completed,
    ...stamps(m),
    completed_at: iso(m.completed_at),
  };
}

export function roleObject(r: Role) {
  return { id: r.id, name: r.name, permissions: r.permissions, is_default: r.is_default, ...stamps(r) };
}

export function groupObject(g: Group) {
  return { id: g.id, name: g.name, members: g.members, ...stamps(g) };
}

export function sourceObject(s: AutomationSource) {
  return {
    id: s.id,
    project_id: s.project_id,
    name: s.name,
    status: s.status,
    is_retired: s.is_retired,
    run_count: s.run_count,
    test_count_average: s.test_count_average,
    elapsed_average: s.elapsed_average,
    ran_at: iso(s.ran_at),
    ...stamps(s),
    retired_at: iso(s.retired_at),
    retired_by: s.retired_by,
  };
}

/** A result from the columns; `issues` holds issue ids (the spec leaves the element shape open). */
export function resultJson(data: Dataset, i: number): string {
  const r = data.results;
  const issue = r.ref('issue_id', i);
  return JSON.stringify({
    id: i + 1,
    project_id: r.int('project_id', i),
    run_id: r.int('run_id', i),
    test_id: r.int('test_id', i),
    case_id: r.int('case_id', i),
    status_id: r.int('status_id', i),
    note: NOTES[r.int('note', i)] ?? '',
    elapsed: r.int('elapsed', i),
    assignee_id: r.ref('assignee_id', i),
    is_latest: r.int('is_latest', i) === 1,
    issues: issue === null ? [] : [issue],
    created_at: iso(r.time('created_at', i)),
    created_by: r.int('created_by', i),
    updated_at: iso(r.time('updated_at', i)),
    updated_by: r.ref('updated_by', i),
    deleted_at: iso(r.time('deleted_at', i)),
    deleted_by: r.ref('deleted_by', i),
  });
}
