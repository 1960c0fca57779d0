/**
 * Control-plane mutations: each changes the data as the real instance would and answers the
 * changed object as the API shows it. Time comes from the logical clock, so a mutated state is
 * as deterministic as a fresh one. Missing things answer 404, impossible transitions 409.
 */
import { byId } from './dataset.js';
import { ControlError, asObject, intField, requireInt, stringField } from './control-error.js';
import { ADMIN_USER_ID, makeToken } from './people.js';
import { milestoneObject, projectObject, resultJson, runObject, sessionObject } from './serialize.js';
import type { EmulatorState } from './state.js';

type Body = Record<string, unknown>;
type Mutation = (state: EmulatorState, body: Body) => unknown;

function mustFind<T extends { id: number }>(list: readonly T[], body: Body, field: string): T {
  const id = requireInt(body, field);
  const item = byId(list, id);
  if (!item) throw new ControlError(404, field, `No resource with ${field} ${id}.`);
  return item;
}

/** The acting user (`user_id`, default the admin), who must exist. */
function actor(state: EmulatorState, body: Body): number {
  if (body.user_id === undefined) return ADMIN_USER_ID;
  return mustFind(state.data.users, body, 'user_id').id;
}

function conflict(field: string, message: string): never {
  throw new ControlError(409, field, message);
}

/** Applies a change made by the acting user now: the given fields plus updated_at/by. */
function change<T extends { updated_at: number | null; updated_by: number | null }>(
  state: EmulatorState,
  body: Body,
  item: T,
  fields: (at: number, by: number) => Partial<T>,
): void {
  const by = actor(state, body);
  const at = state.clock.tick();
  Object.assign(item, fields(at, by), { updated_at: at, updated_by: by });
}

const closeRun: Mutation = (state, body) => {
  const run = mustFind(state.data.runs, body, 'run_id');
  if (run.is_closed) conflict('run_id', `Run ${run.id} is already closed.`);
  change(state, body, run, (at, by) => ({ is_closed: true, closed_at: at, closed_by: by }));
  state.memo.forget('run', run.id);
  return runObject(state.data, run);
};

const closeSession: Mutation = (state, body) => {
  const s = mustFind(state.data.sessions, body, 'session_id');
  if (s.is_closed) conflict('session_id', `Session ${s.id} is already closed.`);
  change(state, body, s, (at, by) => ({ is_closed: true, closed_at: at, closed_by: by }));
  state.memo.forget('session', s.id);
  return sessionObject(state.data, s);
};

const completeMilestone: Mutation = (state, body) => {
  const m = mustFind(state.data.milestones, body, 'milestone_id');
  if (m.is_completed) conflict('milestone_id', `Milestone ${m.id} is already completed.`);
  change(state, body, m, (at) => ({ is_completed: true, completed_at: at }));
  state.memo.forget('milestone', m.id);
  state.memo.forget('project', m.project_id); // its milestone counters changed
  return milestoneObject(m);
};

/**
 * A new latest result for one test of an active run (default: its first test). The previous
 * latest result loses is_latest; the run's counters move the test to the new status.
 */
const addResult: Mutation = (state, body) => {
  const run = mustFind(state.data.runs, body, 'run_id');
  const statusId = requireInt(body, 'status_id', 1, state.data.statuses.length);
  const testId = intField(body, 'test_id', { min: 1, optional: true }) ?? run.testIds[0]!;
  const t = run.testIds.indexOf(testId);
  if (t < 0) throw new ControlError(404, 'test_id', `Run ${run.id} has no test ${testId}.`);
  const assignee = body.assignee_id === null ? null : intField(body, 'assignee_id', { min: 1, optional: true }) ?? null;
  if (run.is_closed) conflict('run_id', `Run ${run.id} is closed; results cannot be added.`);
  const by = actor(state, body);
  const at = state.clock.tick();
  const store = state.data.results;
  const previous = run.latest[t]!;
  if (previous >= 0) store.setInt('is_latest', previous, 0);
  const index = store.push({
    project_id: run.project_id, run_id: run.id, test_id: testId, case_id: run.caseIds[t]!, status_id: statusId,
    note: 0, elapsed: intField(body, 'elapsed', { min: 0, optional: true }) ?? 60, assignee_id: assignee,
    is_latest: true, issue_id: null, created_at: at, created_by: by,
    updated_at: null, updated_by: null, deleted_at: null, deleted_by: null,
  });
  run.latest[t] = index;
  state.data.runResults[run.id - 1]!.push(index);
  run.counts[previous < 0 ? 0 : store.int('status_id', previous) - 1]!--;
  run.counts[statusId - 1]!++;
  Object.assign(run, { updated_at: at, updated_by: by });
  state.memo.forget('run', run.id);
  return JSON.parse(resultJson(state.data, index));
};

const renameProject: Mutation = (state, body) => {
  const p = mustFind(state.data.projects, body, 'project_id');
  const name = stringField(body, 'name');
  change(state, body, p, () => ({ name }));
  state.memo.forget('project', p.id);
  return projectObject(state.data, p);
};

const revokeToken: Mutation = (state, body) => {
  const token = stringField(body, 'token');
  const caller = state.findCaller(token);
  if (!caller) throw new ControlError(404, 'token', 'No such token.');
  caller.revoked = true;
  return { token, user_id: caller.userId, revoked: true };
};

/** A second (third, ...) token for a user: deterministic, derived from the seed and a counter. */
const issueToken: Mutation = (state, body) => {
  const user = mustFind(state.data.users, body, 'user_id');
  const n = state.data.callers.filter((c) => c.userId === user.id).length;
  const token = makeToken(state.data.seed, user.id, n);
  state.addCaller({ token, userId: user.id, revoked: false });
  return state.describeUser(user.id, token);
};

function changeAccess(grant: boolean): Mutation {
  return (state, body) => {
    const user = mustFind(state.data.users, body, 'user_id');
    const project = mustFind(state.data.projects, body, 'project_id');
    const set = state.data.access.get(user.id)!;
    if (grant) set.add(project.id);
    else set.delete(project.id);
    const token = state.data.callers.find((c) => c.userId === user.id)?.token;
    return state.describeUser(user.id, token);
  };
}

const MUTATIONS: Record<string, Mutation> = {
  close_run: closeRun,
  close_session: closeSession,
  complete_milestone: completeMilestone,
  add_result: addResult,
  rename_project: renameProject,
  revoke_token: revokeToken,
  issue_token: issueToken,
  grant_project: changeAccess(true),
  revoke_project: changeAccess(false),
};

export const MUTATION_OPS = Object.keys(MUTATIONS);

export function applyMutation(state: EmulatorState, raw: unknown): unknown {
  const body = asObject(raw);
  const op = body.op;
  const mutation = typeof op === 'string' ? MUTATIONS[op] : undefined;
  if (!mutation) throw new ControlError(400, 'op', `The op must be one of ${MUTATION_OPS.join(', ')}.`);
  return mutation(state, body);
}
