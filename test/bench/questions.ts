/**
 * What the scenario clients ask and how they ask it: one timed GET over an undici Pool, the
 * facts of a project a question set needs (an active run, a milestone), and the question sets
 * themselves: a CI job's ten questions and a dashboard's twelve panels.
 */
import { Pool, type Dispatcher } from 'undici';
import { quantile } from './report.js';
import type { Emulator } from './servers.js';

export interface Timed {
  readonly ms: number;
  readonly status: number;
  /** Body bytes received (0 for a 304). */
  readonly bytes: number;
  readonly body: Buffer;
  readonly cacheStatus: string;
  readonly etag: string | undefined;
}

const one = (v: string | string[] | undefined): string | undefined => (Array.isArray(v) ? v.join(', ') : v);

/** GET `path` with `headers`, timed from the request to the last body byte. */
export async function timedGet(pool: Pool | Dispatcher, path: string, headers: Record<string, string>, timeoutMs = 30_000): Promise<Timed> {
  const t0 = process.hrtime.bigint();
  const res = await pool.request({ method: 'GET', path, headers, headersTimeout: timeoutMs, bodyTimeout: timeoutMs });
  const body = Buffer.from(await res.body.arrayBuffer());
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  return { ms, status: res.statusCode, bytes: body.length, body, cacheStatus: one(res.headers['cache-status']) ?? '', etag: one(res.headers['etag']) };
}

export interface LatencySummary {
  readonly count: number;
  readonly p50Ms: number;
  readonly p90Ms: number;
  readonly p99Ms: number;
  readonly maxMs: number;
}

export function latencySummary(ms: readonly number[]): LatencySummary {
  return { count: ms.length, p50Ms: quantile(ms, 0.5), p90Ms: quantile(ms, 0.9), p99Ms: quantile(ms, 0.99), maxMs: ms.length ? Math.max(...ms) : NaN };
}

/** Counts of `labels`, e.g. statuses. */
export function tally(labels: Iterable<string>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const l of labels) out[l] = (out[l] ?? 0) + 1;
  return out;
}

/** One request of a load: GET unless `method` says otherwise. */
export interface Ask {
  readonly path: string;
  readonly method?: 'GET' | 'PUT';
  readonly authorization?: string;
  readonly body?: string;
}

/**
 * `count` requests made by `ask`, `atOnce` at a time (each worker sends the next as soon as its
 * last is answered, its body read whole); the tally of statuses, a failure as `error <code>`.
 */
export async function drive(url: string, count: number, atOnce: number, ask: (i: number) => Ask): Promise<Record<string, number>> {
  const pool = new Pool(url, { connections: atOnce });
  const statuses: string[] = [];
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < count) {
      const { path, method = 'GET', authorization, body } = ask(next++);
      const headers: Record<string, string> = authorization === undefined ? {} : { authorization };
      if (body !== undefined) headers['content-type'] = 'application/json';
      try {
        const res = await pool.request({ method, path, headers, body, headersTimeout: 60_000, bodyTimeout: 60_000 });
        await res.body.dump();
        statuses.push(String(res.statusCode));
      } catch (err) {
        statuses.push(`error ${(err as { code?: string }).code ?? String(err).slice(0, 40)}`);
      }
    }
  };
  try {
    await Promise.all(Array.from({ length: atOnce }, worker));
  } finally {
    await pool.close();
  }
  return tally(statuses);
}

export interface ProjectFacts {
  readonly projectId: number;
  /** An active (open) run of the project, and a milestone of it. */
  readonly runId: number;
  readonly milestoneId: number;
  /** A completed project's answers are `settled` (long-lived): a different freshness rule. */
  readonly completed: boolean;
}

/** Facts of `projectId` read from the emulator directly with an admin token. */
export async function projectFacts(emulator: Emulator, projectId: number): Promise<ProjectFacts> {
  const admin = emulator.tokens.find((t) => t.is_admin);
  if (!admin) throw new Error('the emulator lists no admin token');
  const get = async (path: string): Promise<any> => {
    const res = await fetch(`${emulator.url}/api/v1${path}`, { headers: { authorization: `Bearer ${admin.token}` } });
    if (res.status !== 200) throw new Error(`emulator GET ${path} → ${res.status}`);
    return res.json();
  };
  const project = (await get(`/projects/${projectId}`)) as { result: { is_completed: boolean } };
  const runs = (await get(`/projects/${projectId}/runs?is_closed=0&per_page=15`)) as { result: { id: number }[] };
  const milestones = (await get(`/projects/${projectId}/milestones?per_page=15`)) as { result: { id: number }[] };
  const run = runs.result[0];
  const milestone = milestones.result[0];
  if (!run || !milestone) throw new Error(`project ${projectId} has no open run or no milestone`);
  return { projectId, runId: run.id, milestoneId: milestone.id, completed: project.result.is_completed };
}

/** A CI job's ten questions about one project (the same for every agent). */
export function ciQuestions(f: ProjectFacts): string[] {
  const p = `/api/v1/projects/${f.projectId}`;
  return [
    p,
    `${p}/runs?is_closed=0&per_page=25&expands=users`,
    `${p}/runs?is_closed=1&per_page=15&sort=runs:closed_at`,
    `${p}/runs?milestone_id=${f.milestoneId}&per_page=25`,
    `${p}/milestones?is_completed=0&expands=milestones`,
    `${p}/sessions?is_closed=0&per_page=25&expands=users`,
    `${p}/automation/sources?is_retired=0`,
    `${p}/users?per_page=100`,
    `/api/v1/runs/${f.runId}?expands=statuses`,
    `/api/v1/runs/${f.runId}/results?get_latest_result=1&per_page=50`,
  ];
}

/**
 * A dashboard user's twelve panels: four shared by the dashboard's users (the same URL for each:
 * the project's header, its open runs, its open milestones, the watched run), eight of their own
 * (mostly filtered by themselves as creator or assignee, with their own page sizes and expands).
 * Keys are per user (src/cache/key.ts), so a shared panel is still one entry per user.
 */
export function dashboardPanels(f: ProjectFacts, userId: number): { shared: string[]; own: string[] } {
  const p = `/api/v1/projects/${f.projectId}`;
  return {
    shared: [p, `${p}/runs?is_closed=0&per_page=25&expands=users`, `${p}/milestones?is_completed=0&per_page=15`, `/api/v1/runs/${f.runId}?expands=statuses`],
    own: [
      `${p}/runs?created_by=${userId}&per_page=15`,
      `${p}/runs?created_by=${userId}&is_closed=1&per_page=15&sort=runs:closed_at`,
      `${p}/sessions?assignee_id=${userId}&is_closed=0&per_page=15&expands=users`,
      `${p}/sessions?created_by=${userId}&per_page=15`,
      `${p}/milestones?created_by=${userId}&per_page=15&expands=milestone_stats`,
      `/api/v1/runs/${f.runId}/results?assignee_id=${userId}&per_page=25`,
      `/api/v1/runs/${f.runId}/results?created_by=${userId}&get_latest_result=1&per_page=15`,
      `${p}/automation/sources?is_retired=0&sort=automation_sources:ran_at&per_page=15`,
    ],
  };
}
