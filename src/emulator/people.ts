/**
 * Users, roles, groups, projects and who may see which project. The first five users are the
 * callers tests rely on, with fixed project access (independent of the seed):
 *   user 1: site admin, every project;
 *   user 2: the first half of the projects;      user 3: the middle half;
 *   user 4: the odd project ids;                 user 5: no project at all.
 * The three member sets overlap pairwise. Every other user gets a random share of projects.
 */
import { createHash } from 'node:crypto';
import { FIRST_NAMES, LAST_NAMES, PROJECT_NAMES, ROLE_NAMES } from './lookups.js';
import { DATASET_NOW_MS, HISTORY_MS, type Caller, type Group, type Project, type Role, type User } from './model.js';
import type { Prng } from './prng.js';

export const ADMIN_USER_ID = 1;
const CALLER_COUNT = 5;
const DAY_MS = 24 * 3600 * 1000;
/** Users, roles and projects predate the work in them: they are created in the first tenth of history. */
const SETUP_START_MS = DATASET_NOW_MS - HISTORY_MS - 60 * DAY_MS;

/** Project ids a fixed caller can see; undefined for users without fixed access. */
function fixedAccess(userId: number, projectCount: number): number[] | undefined {
  const all = Array.from({ length: projectCount }, (_, i) => i + 1);
  switch (userId) {
    case 1:
      return all;
    case 2:
      return all.filter((id) => id <= Math.ceil(projectCount / 2));
    case 3:
      return all.filter((id) => id > Math.floor(projectCount / 4) && id <= Math.ceil((3 * projectCount) / 4));
    case 4:
      return all.filter((id) => id % 2 === 1);
    case 5:
      return [];
    default:
      return undefined;
  }
}

/** Deterministic per seed, distinct per user (and per further token `n`), unguessable enough for a test double. */
export function makeToken(seed: number, userId: number, n = 0): string {
  const input = n === 0 ? `tm-cache-emulator:${seed}:${userId}` : `tm-cache-emulator:${seed}:${userId}:${n}`;
  return 'tmc_' + createHash('sha256').update(input).digest('hex').slice(0, 40);
}

function setupTime(rng: Prng): number {
  return SETUP_START_MS + rng.int(0, 30 * DAY_MS);
}

export function makeRoles(rng: Prng): Role[] {
  return ROLE_NAMES.map((name, i) => {
    const created_at = setupTime(rng);
    const updated = rng.chance(0.5);
    return {
      id: i + 1,
      name,
      permissions: rng.int(1, 0xffff),
      is_default: i === 1,
      created_at,
      created_by: ADMIN_USER_ID,
      updated_at: updated ? created_at + rng.int(DAY_MS, 300 * DAY_MS) : null,
      updated_by: updated ? ADMIN_USER_ID : null,
    };
  });
}

export function makeUsers(rng: Prng, count: number, roleCount: number): User[] {
  const users: User[] = [];
  for (let id = 1; id <= count; id++) {
    const first = id === 1 ? 'Ada' : rng.pick(FIRST_NAMES);
    const last = id === 1 ? 'Admin' : rng.pick(LAST_NAMES);
    const created_at = SETUP_START_MS + id * 60_000 + rng.int(0, 59_999);
    const updated = rng.chance(0.6);
    users.push({
      id,
      name: `${first} ${last}`,
      email: `${first}.${last}.${id}@example.test`.toLowerCase(),
      type: id === ADMIN_USER_ID ? 2 : 1,
      timezone: rng.chance(0.3) ? null : rng.pick(['UTC', 'Europe/Berlin', 'America/New_York', 'Asia/Tokyo']),
      date_format: rng.chance(0.4) ? null : rng.pick(['Y-m-d', 'd.m.Y', 'm/d/Y']),
      time_format: rng.chance(0.4) ? null : rng.pick(['H:i', 'h:i A']),
      role_id: id === ADMIN_USER_ID ? roleCount : rng.int(1, roleCount),
      groups: [],
      is_admin: id === ADMIN_USER_ID,
      created_at,
      created_by: id === ADMIN_USER_ID ? null : ADMIN_USER_ID,
      updated_at: updated ? created_at + rng.int(DAY_MS, HISTORY_MS) : null,
      updated_by: updated ? rng.pick([ADMIN_USER_ID, id]) : null,
    });
  }
  return users;
}

/** Groups with random members; each user's `groups` is kept consistent with `members`. */
export function makeGroups(rng: Prng, count: number, users: User[]): Group[] {
  const groups: Group[] = [];
  for (let id = 1; id <= count; id++) {
    const members = users.filter(() => rng.chance(0.25)).map((u) => u.id);
    for (const m of members) users[m - 1]!.groups.push(id);
    const created_at = setupTime(rng);
    const updated = rng.chance(0.5);
    groups.push({
      id,
      name: `Group ${String.fromCharCode(64 + ((id - 1) % 26) + 1)}${id > 26 ? id : ''}`,
      members,
      created_at,
      created_by: ADMIN_USER_ID,
      updated_at: updated ? created_at + rng.int(DAY_MS, HISTORY_MS) : null,
      updated_by: updated ? ADMIN_USER_ID : null,
    });
  }
  return groups;
}

/** Every third project is completed, so each member has both active and completed ones. */
export function makeProjects(rng: Prng, count: number): Project[] {
  const projects: Project[] = [];
  for (let id = 1; id <= count; id++) {
    const created_at = SETUP_START_MS + (id * DAY_MS) / 4 + rng.int(0, 3600_000);
    const is_completed = id % 3 === 0;
    const completed_at = is_completed ? DATASET_NOW_MS - rng.int(DAY_MS, 120 * DAY_MS) : null;
    const updated = is_completed || rng.chance(0.6);
    const base = PROJECT_NAMES[(id - 1) % PROJECT_NAMES.length]!;
    projects.push({
      id,
      name: id <= PROJECT_NAMES.length ? base : `${base} ${Math.ceil(id / PROJECT_NAMES.length)}`,
      note: rng.chance(0.4) ? null : `Tests for the ${base.toLowerCase()} area.`,
      is_completed,
      completed_at,
      created_at,
      created_by: ADMIN_USER_ID,
      updated_at: updated ? (completed_at ?? created_at + rng.int(DAY_MS, HISTORY_MS)) : null,
      updated_by: updated ? ADMIN_USER_ID : null,
    });
  }
  return projects;
}

/** user id → accessible project ids; every project ends with at least three members. */
export function makeMemberships(rng: Prng, users: readonly User[], projectCount: number): Map<number, Set<number>> {
  const access = new Map<number, Set<number>>();
  for (const u of users) {
    const fixed = fixedAccess(u.id, projectCount);
    const ids = fixed ?? Array.from({ length: projectCount }, (_, i) => i + 1).filter(() => rng.chance(0.35));
    access.set(u.id, new Set(ids));
  }
  const others = users.filter((u) => u.id > CALLER_COUNT);
  for (let p = 1; p <= projectCount && others.length > 0; p++) {
    for (let k = 0; k < 2; k++) access.get(others[(p * 2 + k) % others.length]!.id)!.add(p);
  }
  return access;
}

export function makeCallers(seed: number): Caller[] {
  return Array.from({ length: CALLER_COUNT }, (_, i) => ({ token: makeToken(seed, i + 1), userId: i + 1, revoked: false }));
}
