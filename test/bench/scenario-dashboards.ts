/**
 * Scenario "dashboards": polling dashboards all day. 50 dashboards of 4 users each (200 users,
 * so a large emulator: medium has 120), one project per dashboard; every user's dashboard polls
 * its 12 panels (questions.ts dashboardPanels: 4 shared by the dashboard's users, 8 their own)
 * all at once every poll interval, from a random phase. Half the users send If-None-Match with
 * the ETag they last got for the panel (a browser's cache), the other half do not.
 *
 * Time is compressed: tm-cache runs with its default freshness settings multiplied by `scale`
 * (lists 30 s fresh + 30 s stale-while-revalidate, settled resources 1 h + 1 h), and so are the
 * poll interval (10 s) and the other clocks that cost upstream requests (identity.ttlMs,
 * access.ttlMs, access.projectConfirmMs): the counts are those of `1/scale` times as long a run.
 *
 * Measured over the steady state (the first freshness period, ttl + stale-while-revalidate, is the
 * warm-up and left out): client requests, upstream requests per route (emulator stats), offload,
 * p50/p99 latency, body bytes sent vs. what clients asking upstream directly would have pulled
 * (the full body on every poll), upstream requests per (unscaled) minute. Then the worst case:
 * every dashboard's project renamed upstream (emulator mutations) and, for every user, how long
 * until a poll of their project panel shows the new name, against the bound ttl + swr + poll.
 */
import { Pool } from 'undici';
import { setTimeout as sleep } from 'node:timers/promises';
import { dashboardPanels, latencySummary, projectFacts, timedGet, type LatencySummary, type ProjectFacts } from './questions.js';
import { fmt, printTable, type Check } from './report.js';
import { startEmulator, startTmCache, writeConfig, type Emulator, type TokenInfo } from './servers.js';

/** tm-cache's defaults (config/default.yaml) that the scenario scales. */
const DEFAULTS = {
  ttlMs: 30_000,
  staleWhileRevalidateMs: 30_000,
  settledTtlMs: 3_600_000,
  identityTtlMs: 60_000,
  accessTtlMs: 300_000,
  projectConfirmMs: 30_000,
};
const POLL_MS = 10_000;

export interface DashboardOptions {
  readonly dashboards: number;
  readonly usersPerDashboard: number;
  /** Time compression: every clock × scale (0.1: poll every 1 s, ttl 3 s). */
  readonly scale: number;
  /** Freshness periods (ttl + swr) measured after the warm-up period. */
  readonly periods: number;
  /** Share of users sending If-None-Match. */
  readonly conditionalShare: number;
}

interface Poll {
  readonly atMs: number;
  readonly ms: number;
  readonly status: number;
  readonly bytes: number;
  readonly directBytes: number;
}

interface Dashboard {
  readonly facts: ProjectFacts;
  readonly users: TokenInfo[];
}

export interface DashboardScenario {
  readonly options: DashboardOptions;
  readonly scaled: { readonly pollMs: number; readonly ttlMs: number; readonly staleWhileRevalidateMs: number };
  readonly warmupS: number;
  readonly steadyS: number;
  readonly clientRequests: number;
  readonly notModified: number;
  readonly errors: number;
  readonly upstreamRequests: number;
  readonly upstreamByRoute: Record<string, number>;
  readonly offload: number;
  /** The best offload per-user keys allow at these settings (see `ceiling`). */
  readonly offloadCeiling: number;
  readonly latency: LatencySummary;
  readonly bytesSent: number;
  readonly bytesDirect: number;
  readonly upstreamPerMinute: number;
  readonly clientPerMinute: number;
  readonly staleness: { readonly samples: number; readonly maxS: number; readonly medianS: number; readonly boundS: number };
  readonly pollLagMs: number;
  readonly checks: Check[];
}

/**
 * With one entry per (user, panel): an entry filled (or refreshed) just after a poll is fresh for
 * ttl, so the polls at ages 0 < poll, 2·poll, ... < ttl + (fill time) are hits and the first one
 * past ttl serves it stale and refreshes it. Each (user, panel) thus costs one upstream request
 * per ⌊ttl ÷ poll⌋ + 1 polls: at 30 s ÷ 10 s, one per 4 polls, an offload of at most 75%.
 */
export function offloadCeiling(ttlMs: number, pollMs: number): number {
  return 1 - 1 / (Math.floor(ttlMs / pollMs) + 1);
}

/** 50 dashboards × 4 users with access to the dashboard's (open) project, tokens issued for each. */
async function makeDashboards(emulator: Emulator, options: DashboardOptions): Promise<Dashboard[]> {
  const needed = options.dashboards * options.usersPerDashboard;
  // Users 6 on (the first five are the fixed callers); about a third of users see a given project.
  const candidates = await emulator.issueTokens(Array.from({ length: Math.ceil(needed * 1.6) }, (_, i) => 6 + i));
  const projects = new Map<number, ProjectFacts>();
  const open: number[] = [];
  for (let id = 1; open.length < options.dashboards && id <= 100; id++) {
    const facts = await projectFacts(emulator, id).catch(() => undefined); // past the last project, or no open run
    if (!facts || facts.completed) continue;
    projects.set(id, facts);
    open.push(id);
  }
  const used = new Set<number>();
  const dashboards: Dashboard[] = [];
  for (let d = 0; d < options.dashboards; d++) {
    const projectId = open[d % open.length]!;
    const users = candidates.filter((t) => !used.has(t.user_id) && t.project_ids.includes(projectId)).slice(0, options.usersPerDashboard);
    if (users.length < options.usersPerDashboard) throw new Error(`not enough users with access to project ${projectId} for dashboard ${d}`);
    for (const u of users) used.add(u.user_id);
    dashboards.push({ facts: projects.get(projectId)!, users });
  }
  return dashboards;
}

export async function runDashboardsScenario(dir: string, options: DashboardOptions): Promise<DashboardScenario> {
  const s = options.scale;
  const scaled = { pollMs: POLL_MS * s, ttlMs: DEFAULTS.ttlMs * s, staleWhileRevalidateMs: DEFAULTS.staleWhileRevalidateMs * s };
  const periodMs = scaled.ttlMs + scaled.staleWhileRevalidateMs;
  const config = writeConfig(dir, 'dashboards', {
    cache: {
      freshness: {
        default: { ttlMs: scaled.ttlMs, staleWhileRevalidateMs: scaled.staleWhileRevalidateMs },
        settled: { ttlMs: DEFAULTS.settledTtlMs * s, staleWhileRevalidateMs: DEFAULTS.settledTtlMs * s },
      },
    },
    identity: { ttlMs: DEFAULTS.identityTtlMs * s },
    access: { ttlMs: DEFAULTS.accessTtlMs * s, projectConfirmMs: DEFAULTS.projectConfirmMs * s },
  });
  const emulator = await startEmulator('large');
  try {
    const dashboards = await makeDashboards(emulator, options);
    // Every panel of the first dashboard answers 200 when asked directly (no typo'd parameter).
    for (const user of dashboards[0]!.users) {
      const { shared, own } = dashboardPanels(dashboards[0]!.facts, user.user_id);
      for (const path of [...shared, ...own]) {
        const res = await fetch(emulator.url + path, { headers: { authorization: `Bearer ${user.token}` } });
        if (res.status !== 200)
          throw new Error(`panel ${path} → ${res.status} from the emulator for user ${user.user_id}: ${(await res.text()).slice(0, 200)}`);
      }
    }
    const proxy = await startTmCache(emulator.url, { name: 'tm-cache (dashboards)', env: { TM_CACHE_CONFIG: config } });
    const pool = new Pool(proxy.url, { connections: 128 });
    try {
      return await drive(emulator, pool, dashboards, options, scaled, periodMs);
    } finally {
      await pool.close();
      await proxy.proc.stop();
    }
  } finally {
    await emulator.proc.stop();
  }
}

async function drive(
  emulator: Emulator,
  pool: Pool,
  dashboards: Dashboard[],
  options: DashboardOptions,
  scaled: DashboardScenario['scaled'],
  periodMs: number,
): Promise<DashboardScenario> {
  const { pollMs } = scaled;
  const warmupMs = periodMs;
  const totalMs = warmupMs + options.periods * periodMs;
  const boundMs = scaled.ttlMs + scaled.staleWhileRevalidateMs + pollMs;
  // The change happens once the steady state is reached, early enough that every watcher can see it.
  const mutateAtMs = Math.max(warmupMs + pollMs, totalMs - boundMs - 2 * pollMs);
  // Every dashboard's project is renamed: each of the 200 users is a watcher of one change.
  const stamp = Date.now();
  const renames = new Map<number, { name: string; atMs?: number }>();
  for (const d of dashboards) renames.set(d.facts.projectId, { name: `Renamed by the dashboards bench ${stamp} (project ${d.facts.projectId})` });
  const seenAfterMs = new Map<number, number>();

  const polls: Poll[] = [];
  let errors = 0;
  let maxLagMs = 0;
  const t0 = performance.now();
  const now = () => performance.now() - t0;
  let upstreamAtWarmup: Promise<{ total: number; by_route: Record<string, number> }> | undefined;

  const userLoop = async (d: Dashboard, user: TokenInfo, index: number): Promise<void> => {
    const { shared, own } = dashboardPanels(d.facts, user.user_id);
    const panels = [...shared, ...own];
    // Spread evenly: exactly ⌊users × share⌋ users send If-None-Match (0.5: every other one).
    const conditional = Math.floor((index + 1) * options.conditionalShare) > Math.floor(index * options.conditionalShare);
    const etags: (string | undefined)[] = panels.map(() => undefined);
    const lengths: number[] = panels.map(() => 0);
    const auth = { authorization: `Bearer ${user.token}` };
    const phase = Math.random() * pollMs;
    for (let k = 0; ; k++) {
      const due = phase + k * pollMs;
      if (due >= totalMs) return;
      const wait = due - now();
      if (wait > 0) await sleep(wait);
      else maxLagMs = Math.max(maxLagMs, -wait);
      await Promise.all(
        panels.map(async (path, i) => {
          const atMs = now();
          try {
            const etag = etags[i];
            const got = await timedGet(pool, path, conditional && etag ? { ...auth, 'if-none-match': etag } : auth);
            if (got.status === 200) {
              etags[i] = got.etag;
              lengths[i] = got.bytes;
            } else if (got.status !== 304) {
              errors++;
            }
            polls.push({ atMs, ms: got.ms, status: got.status, bytes: got.bytes, directBytes: lengths[i]! });
            const rename = renames.get(d.facts.projectId)!;
            if (i === 0 && rename.atMs !== undefined && !seenAfterMs.has(user.user_id) && got.status === 200 && got.body.includes(rename.name)) {
              seenAfterMs.set(user.user_id, now() - rename.atMs);
            }
          } catch {
            errors++;
          }
        }),
      );
    }
  };

  const control = (async () => {
    await sleep(warmupMs);
    upstreamAtWarmup = emulator.stats();
    await sleep(Math.max(0, mutateAtMs - now()));
    for (const [projectId, rename] of renames) {
      await emulator.mutate({ op: 'rename_project', project_id: projectId, name: rename.name });
      rename.atMs = now();
    }
  })();
  let index = 0;
  await Promise.all([control, ...dashboards.flatMap((d) => d.users.map((u) => userLoop(d, u, index++)))]);
  const elapsedMs = now();
  const [before, after] = [await upstreamAtWarmup!, await emulator.stats()];

  const steady = polls.filter((p) => p.atMs >= warmupMs);
  const steadyS = (elapsedMs - warmupMs) / 1_000;
  const byRoute: Record<string, number> = {};
  for (const [route, n] of Object.entries(after.by_route)) {
    const d = n - (before.by_route[route] ?? 0);
    if (d > 0) byRoute[route] = d;
  }
  const upstreamRequests = after.total - before.total;
  const clientRequests = steady.length;
  const notModified = steady.filter((p) => p.status === 304).length;
  const bytesSent = steady.reduce((a, p) => a + p.bytes, 0);
  const bytesDirect = steady.reduce((a, p) => a + p.directBytes, 0);
  // Per minute of dashboard time: the steady window stands for steadyS / scale seconds.
  const perMinute = (n: number) => (n * 60) / (steadyS / options.scale);
  const watchers = dashboards.reduce((a, d) => a + d.users.length, 0);
  const delays = [...seenAfterMs.values()].map((ms) => ms / 1_000 / options.scale);
  const staleness = {
    samples: delays.length,
    maxS: delays.length ? Math.max(...delays) : NaN,
    medianS: latencySummary(delays).p50Ms,
    boundS: boundMs / 1_000 / options.scale,
  };
  const result = {
    options,
    scaled,
    warmupS: warmupMs / 1_000,
    steadyS,
    clientRequests,
    notModified,
    errors,
    upstreamRequests,
    upstreamByRoute: byRoute,
    offload: 1 - upstreamRequests / clientRequests,
    offloadCeiling: offloadCeiling(scaled.ttlMs, pollMs),
    latency: latencySummary(steady.map((p) => p.ms)),
    bytesSent,
    bytesDirect,
    upstreamPerMinute: perMinute(upstreamRequests),
    clientPerMinute: perMinute(clientRequests),
    staleness,
    pollLagMs: maxLagMs,
  };
  const users = options.dashboards * options.usersPerDashboard;
  const MB = 1e6;
  printTable(
    `7. Dashboards: ${options.dashboards} dashboards × ${options.usersPerDashboard} users (${users} users, large emulator), 12 panels each, polled every ${POLL_MS / 1_000} s; ` +
      `default freshness; ${Math.round(options.conditionalShare * 100)}% of users send If-None-Match`,
    ['figure', 'value'],
    [
      [
        'time compression',
        `×${options.scale}: poll every ${fmt(pollMs / 1_000, 1)} s, ttl ${fmt(scaled.ttlMs / 1_000, 1)} s + stale-while-revalidate ${fmt(scaled.staleWhileRevalidateMs / 1_000, 1)} s (identity, access clocks scaled too)`,
      ],
      [
        'measured window',
        `${fmt(steadyS, 1)} s after a ${fmt(warmupMs / 1_000, 1)} s warm-up (the first freshness period, left out) = ${fmt(steadyS / options.scale / 60, 1)} min of dashboard time`,
      ],
      ['client requests', `${clientRequests.toLocaleString('en-US')} (${notModified.toLocaleString('en-US')} answered 304, ${errors} errors)`],
      [
        'upstream requests',
        `${upstreamRequests.toLocaleString('en-US')}: ${Object.entries(byRoute)
          .map(([r, n]) => `${r.replace('GET /api/v1', '')} ${n}`)
          .join(', ')}`,
      ],
      [
        'offload (1 − upstream ÷ client)',
        `${fmt(100 * result.offload, 1)}% (target ≥ 99%; ceiling with per-user keys at these settings ≈ ${fmt(100 * result.offloadCeiling, 0)}%)`,
      ],
      [
        'latency p50 / p99 / max',
        `${fmt(result.latency.p50Ms)} / ${fmt(result.latency.p99Ms)} / ${fmt(result.latency.maxMs)} ms (client side, load core shared with the emulator)`,
      ],
      [
        'body bytes sent vs direct',
        `${fmt(bytesSent / MB, 1)} MB vs ${fmt(bytesDirect / MB, 1)} MB (${fmt(100 * (1 - bytesSent / bytesDirect), 1)}% saved by 304s)`,
      ],
      ['per minute of dashboard time', `${fmt(result.clientPerMinute, 0)} client requests, ${fmt(result.upstreamPerMinute, 0)} upstream requests`],
      [
        'after an upstream change',
        `${renames.size} projects renamed; ${staleness.samples}/${watchers} users saw their project's new name; worst ${fmt(staleness.maxS, 1)} s, median ${fmt(staleness.medianS, 1)} s after the change (bound ttl + swr + poll = ${fmt(staleness.boundS, 0)} s; unscaled seconds)`,
      ],
      ['client scheduling lag (max)', `${fmt(maxLagMs, 0)} ms (a poll fired late because the load core was busy)`],
    ],
    [
      'Keys are per user (src/cache/key.ts), so a panel shared by 4 users is 4 entries, each refreshed on its own: each (user, panel)',
      '  costs one upstream request per ⌊ttl ÷ poll⌋ + 1 polls, whence the ceiling; 99% would need ttl ≥ ~100 polls or answers shared',
      '  between users. GET /projects/{id} counts the project panel and the access confirmations (access.projectConfirmMs) of hits;',
      '  GET /user the identity look-ups (identity.ttlMs).',
    ],
    true,
  );
  return {
    ...result,
    checks: [
      { name: 'dashboards: offload at steady state', value: result.offload, target: '≥ 0.99', pass: result.offload >= 0.99 },
      { name: 'dashboards: offload ceiling of per-user keys (ttl 30 s, poll 10 s)', value: result.offloadCeiling, target: 'info', pass: undefined },
      { name: 'dashboards: p99 latency', value: result.latency.p99Ms, target: 'info', pass: undefined, unit: 'ms' },
      { name: 'dashboards: bytes sent ÷ direct', value: bytesSent / bytesDirect, target: 'info', pass: undefined },
      { name: 'dashboards: upstream requests per minute', value: Math.round(result.upstreamPerMinute), target: 'info', pass: undefined, unit: '' },
      {
        name: 'dashboards: worst delay until a change shows (s)',
        value: staleness.maxS,
        target: `≤ ${fmt(staleness.boundS, 0)} s`,
        pass: staleness.samples === watchers && staleness.maxS <= staleness.boundS,
        unit: 's',
      },
    ],
  };
}
