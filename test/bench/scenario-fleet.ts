/**
 * Scenarios of the fleet's upstream budget (src/upstream/fleet-budget.ts), each against the
 * emulator's instance-wide token bucket (`rate_limit`, src/emulator/rate-limit.ts) and counted
 * from its stats (`peak_per_s`, `rate_limited`, `lockouts`):
 * - fleet-budget: a CI fleet against a known budget: 200 agents on 40 tokens/s, three replicas
 *   sharing a real redis-server, distinct cold questions well beyond the budget;
 * - fleet-learn: an unknown limit (20 req/s, escalating after 3 429s), no budget configured;
 * - fleet-refresh-ahead: polling dashboards, with and without refresh-ahead.
 */
import { Pool } from 'undici';
import { latencySummary, tally, timedGet } from './questions.js';
import { fmt, printTable, type Check } from './report.js';
import { BENCH_BUDGET, startRedis, startTmCache, type Emulator, type Server, type TokenInfo } from './servers.js';

interface InstanceStats {
  readonly total: number;
  readonly peak_per_s: number;
  readonly rate_limited: number;
  readonly lockouts: number;
}

const instanceStats = async (em: Emulator): Promise<InstanceStats> => (await em.stats()) as unknown as InstanceStats;
const members = (em: Emulator): TokenInfo[] => em.tokens.filter((t) => !t.is_admin && t.project_ids.length > 0);
const coldPath = (t: TokenInfo, n: number): string => `/api/v1/projects/${t.project_ids[0]!}/runs?per_page=25&page=${n}`;

async function withFleet<T>(em: Emulator, count: number, config: Record<string, unknown>, fn: (replicas: Server[]) => Promise<T>): Promise<T> {
  const redis = await startRedis();
  const replicas: Server[] = [];
  try {
    for (let i = 0; i < count; i++) replicas.push(await startTmCache(em.url, { name: `tm-cache fleet ${i + 1}`, redisUrl: redis.url, config }));
    return await fn(replicas);
  } finally {
    await Promise.all(replicas.map((r) => r.proc.stop()));
    await redis.proc.stop();
  }
}

/** Each agent asks distinct cold questions, one after another, until `untilMs` (performance.now()); statuses tallied. */
async function coldAgents(em: Emulator, replicas: Server[], agents: number, untilMs: number, firstPage: number): Promise<Record<string, number>> {
  const tokens = members(em);
  const pools = replicas.map((r) => new Pool(r.url, { connections: Math.ceil(agents / replicas.length) }));
  const statuses: string[] = [];
  let next = firstPage;
  try {
    await Promise.all(
      Array.from({ length: agents }, async (_, agent) => {
        const token = tokens[agent % tokens.length]!;
        while (performance.now() < untilMs) {
          try {
            statuses.push(String((await timedGet(pools[agent % pools.length]!, coldPath(token, next++), { authorization: `Bearer ${token.token}` })).status));
          } catch (err) {
            statuses.push(`error ${(err as { code?: string }).code ?? 'unknown'}`);
          }
        }
      }),
    );
  } finally {
    await Promise.all(pools.map((p) => p.close()));
  }
  return tally(statuses);
}

const serverErrors = (statuses: Record<string, number>): number =>
  Object.entries(statuses)
    .filter(([s]) => s.startsWith('5') || s.startsWith('error'))
    .reduce((sum, [, n]) => sum + n, 0);

export async function runFleetBudgetScenario(em: Emulator, o: { agents: number; rps: number; burst: number; seconds: number }): Promise<{ checks: Check[] }> {
  const config = { upstream: { budget: { requestsPerSecond: o.rps, burst: o.burst } } };
  const { statuses, stats } = await withFleet(em, 3, config, async (replicas) => {
    await em.resetStats();
    const statuses = await coldAgents(em, replicas, o.agents, performance.now() + o.seconds * 1000, 100_000);
    return { statuses, stats: await instanceStats(em) };
  });
  const errors = serverErrors(statuses);
  printTable(
    `Fleet budget: ${o.agents} agents asking distinct cold questions for ${o.seconds} s through 3 replicas + Redis, budget ${o.rps} req/s (burst ${o.burst})`,
    ['client answers', 'upstream total', 'peak per s', 'target peak', '429s from the instance'],
    [[JSON.stringify(statuses), stats.total, stats.peak_per_s, `≤ ${o.rps + o.burst}`, stats.rate_limited]],
    ['429s to clients are the budget spent (Retry-After, JSON body); 5xx would be a failure.'],
  );
  return {
    checks: [
      {
        name: 'fleet-budget: instance peak per second',
        value: stats.peak_per_s,
        target: `≤ ${o.rps + o.burst}`,
        pass: stats.peak_per_s <= o.rps + o.burst,
        unit: 'req/s',
      },
      { name: 'fleet-budget: client 5xx or errors', value: errors, target: '= 0', pass: errors === 0, unit: '' },
    ],
  };
}

export async function runFleetLearnScenario(em: Emulator, o: { agents: number; limitRps: number; seconds: number }): Promise<{ checks: Check[] }> {
  const config = { upstream: { budget: { requestsPerSecond: 0 } } };
  await em.faults({ rate_limit: { requests_per_s: o.limitRps, burst: o.limitRps, retry_after_s: 5, escalate_after: 3, lockout_s: 60 } });
  try {
    const { statuses, first, last } = await withFleet(em, 3, config, async (replicas) => {
      await em.resetStats();
      const start = performance.now();
      const running = coldAgents(em, replicas, o.agents, start + o.seconds * 1000, 200_000);
      // The sustained rate: requests the instance served over the second half of the run.
      await new Promise((r) => setTimeout(r, (o.seconds * 1000) / 2));
      const first = await instanceStats(em);
      const statuses = await running;
      return { statuses, first, last: await instanceStats(em) };
    });
    const servedRps = (last.total - last.rate_limited - (first.total - first.rate_limited)) / (o.seconds / 2);
    const errors = serverErrors(statuses);
    printTable(
      `Unknown limit: the instance allows ${o.limitRps} req/s (burst ${o.limitRps}; 429 Retry-After 5 s; 3 429s in a minute lock the account out for 60 s); no budget configured; ${o.agents} agents for ${o.seconds} s through 3 replicas + Redis`,
      ['client answers', 'upstream total', '429s from the instance', 'lockouts', 'served req/s, second half', 'target'],
      [[JSON.stringify(statuses), last.total, last.rate_limited, last.lockouts, fmt(servedRps), `≥ ${fmt(o.limitRps * 0.8)}`]],
    );
    return {
      checks: [
        { name: 'fleet-learn: lockouts', value: last.lockouts, target: '= 0', pass: last.lockouts === 0, unit: '' },
        {
          name: 'fleet-learn: sustained upstream rate (second half)',
          value: servedRps,
          target: `≥ ${fmt(o.limitRps * 0.8)}`,
          pass: servedRps >= o.limitRps * 0.8,
          unit: 'req/s',
        },
        { name: 'fleet-learn: client 5xx or errors', value: errors, target: '= 0', pass: errors === 0, unit: '' },
      ],
    };
  } finally {
    await em.faults({});
  }
}

interface PollRun {
  readonly mode: string;
  readonly polls: number;
  readonly freshShare: number;
  readonly upstream: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly hitP99Ms: number;
}

/** `dashboards` pollers, each polling `panels` keys of its own every `everyMs`, for `seconds`; the first freshness period is warm-up. */
async function poll(
  em: Emulator,
  mode: string,
  refreshAhead: { enabled: boolean; startAt: number },
  o: { dashboards: number; panels: number; everyMs: number; ttlMs: number; seconds: number },
): Promise<PollRun> {
  // The bench's generous budget: this measures refresh-ahead, not the learned budget's cautious start.
  const config = { ...BENCH_BUDGET, cache: { refreshAhead, freshness: { default: { ttlMs: o.ttlMs, staleWhileRevalidateMs: o.ttlMs } } } };
  const server = await startTmCache(em.url, { name: `tm-cache (${mode})`, config });
  const tokens = members(em);
  const pool = new Pool(server.url, { connections: o.dashboards });
  const times: number[] = [];
  const hitTimes: number[] = [];
  let fresh = 0;
  try {
    await em.resetStats();
    const start = performance.now();
    const warmUntil = start + o.ttlMs;
    const end = start + o.seconds * 1000;
    await Promise.all(
      Array.from({ length: o.dashboards }, async (_, d) => {
        const token = tokens[d % tokens.length]!;
        for (let round = 0; performance.now() < end; round++) {
          const due = start + round * o.everyMs + (d * o.everyMs) / o.dashboards;
          await new Promise((r) => setTimeout(r, Math.max(0, due - performance.now())));
          for (let p = 0; p < o.panels; p++) {
            const got = await timedGet(pool, coldPath(token, 300_000 + d * 100 + p), { authorization: `Bearer ${token.token}` });
            if (performance.now() < warmUntil) continue;
            times.push(got.ms);
            if (/; hit/.test(got.cacheStatus)) {
              fresh++;
              hitTimes.push(got.ms);
            }
          }
        }
      }),
    );
    const upstream = (await em.stats()).total;
    const all = latencySummary(times);
    return {
      mode,
      polls: times.length,
      freshShare: fresh / Math.max(1, times.length),
      upstream,
      p50Ms: all.p50Ms,
      p99Ms: all.p99Ms,
      hitP99Ms: latencySummary(hitTimes).p99Ms,
    };
  } finally {
    await pool.close();
    await server.proc.stop();
  }
}

export async function runFleetRefreshAheadScenario(
  em: Emulator,
  o: { dashboards: number; panels: number; everyMs: number; ttlMs: number; seconds: number },
): Promise<{ checks: Check[] }> {
  const off = await poll(em, 'refresh-ahead off', { enabled: false, startAt: 0.75 }, o);
  const on = await poll(em, 'refresh-ahead at 0.75 (default)', { enabled: true, startAt: 0.75 }, o);
  const late = await poll(em, 'refresh-ahead at 0.92', { enabled: true, startAt: 0.92 }, o);
  const runs = [off, on, late];
  printTable(
    `Polling dashboards: ${o.dashboards} dashboards × ${o.panels} panels polled every ${o.everyMs} ms for ${o.seconds} s, fresh ${o.ttlMs} ms then stale-while-revalidate; one replica`,
    ['mode', 'polls after warm-up', 'share fresh', 'upstream requests', 'vs off', 'p50 ms', 'p99 ms', "a hit's p99 ms"],
    runs.map((r) => [
      r.mode,
      r.polls,
      fmt(r.freshShare, 4),
      r.upstream,
      fmt(r.upstream / Math.max(1, off.upstream)),
      fmt(r.p50Ms),
      fmt(r.p99Ms),
      fmt(r.hitP99Ms),
    ]),
    ['Refreshing at a share s of freshness costs about 1/s the refreshes of waiting until stale: 0.75 → ≈ 1.33×, 0.92 → ≈ 1.09×.'],
  );
  const within = (r: PollRun) => r.upstream <= off.upstream * 1.1;
  return {
    checks: [
      { name: 'fleet-refresh-ahead: share of polls fresh (0.75)', value: on.freshShare, target: '≥ 0.99', pass: on.freshShare >= 0.99 },
      { name: 'fleet-refresh-ahead: upstream vs off (0.75)', value: on.upstream / Math.max(1, off.upstream), target: '≤ 1.1', pass: within(on), unit: '×' },
      { name: 'fleet-refresh-ahead: share of polls fresh (0.92)', value: late.freshShare, target: '≥ 0.99', pass: late.freshShare >= 0.99 },
      { name: 'fleet-refresh-ahead: upstream vs off (0.92)', value: late.upstream / Math.max(1, off.upstream), target: '≤ 1.1', pass: within(late), unit: '×' },
      { name: 'fleet-refresh-ahead: p99 poll latency (0.75)', value: on.p99Ms, target: `≈ a hit's (${fmt(on.hitP99Ms)} ms)`, pass: undefined, unit: 'ms' },
    ],
  };
}
