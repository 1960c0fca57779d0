/**
 * What the tests of derived answers share: a question asked through tm-cache with the number of
 * requests it made of the instance (its `/__emulator/stats`), the instance's own answer to the
 * same caller, and a member ready to read a project's shared answers in either sharing mode.
 */
import { expect } from 'vitest';
import type { StatsSnapshot, TestEmulator } from './emulator.js';
import { httpGet, type TestProxy, type TestResponse } from './proxy.js';

export const SHARING = process.env['TM_CACHE_SHARING'] === 'project' ? 'project' : 'user';

export interface Asked {
  readonly res: TestResponse;
  /** Requests that reached the instance while tm-cache answered. */
  readonly upstream: number;
  /** Of them, requests of the operation asked (its route, `GET /api/v1/runs/{run_id}`), identity look-ups apart. */
  readonly asked: number;
  readonly derived: boolean;
}

/** Asks `path` of tm-cache as `token`, counting what reached the instance meanwhile. */
export async function ask(em: TestEmulator, p: TestProxy, path: string, token: string, headers: Record<string, string> = {}): Promise<Asked> {
  const before = await em.stats();
  const res = await p.get(path, token, headers);
  const after = await em.stats();
  const routes = (stats: StatsSnapshot) => Object.entries(stats.by_route).reduce((n, [route, count]) => (route === 'GET /api/v1/user' ? n : n + count), 0);
  return {
    res,
    upstream: after.total - before.total,
    asked: routes(after) - routes(before),
    derived: /; detail=derived$|; detail=derived;/.test(String(res.headers['cache-status'] ?? '')),
  };
}

/** The instance's own answer to `token` for `path`, asked directly. */
export async function direct(em: TestEmulator, path: string, token: string): Promise<unknown> {
  const res = await httpGet(em.url + path, token);
  if (res.status !== 200) throw new Error(`the instance answered ${path} with ${res.status}`);
  return res.json();
}

/** The lists of each area of a project, read (twice) so that a member holds the proof of every area in `project` mode. */
export async function proveAreas(p: TestProxy, token: string, projectId: number, runId?: number): Promise<string[]> {
  const paths = ['runs', 'milestones', 'sessions', 'automation/sources', 'users'].map((list) => `/api/v1/projects/${projectId}/${list}?per_page=15`);
  if (runId !== undefined) paths.push(`/api/v1/runs/${runId}/results?per_page=15`);
  for (const path of paths) for (let i = 0; i < 2; i++) await p.get(path, token);
  return paths;
}

/** `path` is derived: nothing reaches the instance, and the answer is the instance's own to `token`. */
export async function expectDerived(em: TestEmulator, p: TestProxy, path: string, token: string): Promise<void> {
  const answer = await ask(em, p, path, token);
  expect(answer.res.status).toBe(200);
  expect(answer.derived, String(answer.res.headers['cache-status'])).toBe(true);
  expect(answer.upstream).toBe(0);
  expect(answer.res.json()).toEqual(await direct(em, path, token));
}

/** `path` goes to the instance: its own operation asked once, not derived, and the instance's answer relayed. */
export async function expectAsked(em: TestEmulator, p: TestProxy, path: string, token: string, headers: Record<string, string> = {}): Promise<void> {
  const answer = await ask(em, p, path, token, headers);
  expect(answer.res.status).toBe(200);
  expect(answer.derived, String(answer.res.headers['cache-status'])).toBe(false);
  expect(answer.asked).toBe(1);
  expect(answer.res.json()).toEqual(await direct(em, path, token));
}
