/**
 * Scenarios of the fleet's upstream budget (src/upstream/fleet-budget.ts), each against the
 * emulator's instance-wide token bucket (`rate_limit`, src/emulator/rate-limit.ts) and counted
 * from its stats (`peak_per_s`, `rate_limited`, `lockouts`):
 * - fleet-budget: a CI fleet against a known budget: 200 agents on 40 tokens/s, three replicas
 *   sharing a real redis-server, distinct cold questions well beyond the budget;
 * - fleet-learn: an unknown limit (20 req/s, escalating after 3 429s), no budget configured;
 * - fleet-refresh-ahead: polling dashboards, with and without refresh-ahead, lone pollers and
 *   panels shared by several screens.
 */
import { Pool } from 'undici';
import { latencySummary, tally, timedGet } from './questions.js';
import { fmt, printTable, type Check } from './report.js';
import { BENCH_BUDGET, startRedis, startTmCache, type Emulator, type Server, type TokenInfo } from './servers.js';

export interface InstanceStats {
  readonly total: number;
  readonly peak_per_s: number;
  readonly rate_limited: number;
  readonly lockouts: number;
}

export const instanceStats = async (em: Emulator): Promise<InstanceStats> => (await em.stats()) as unknown as InstanceStats;
const members = (em: Emulator): TokenInfo[] => em.tokens.filter((t) => !t.is_admin && t.project_ids.length > 0);
/**
 * The n-th distinct cold question of a member: its runs filtered by a creator who made none (an
 * empty list). A filter, not a page: no cached answer derives it (derived answers never come from
 * a list of other filters), so every one asks the instance.
 */
const coldPath = (t: TokenInfo, n: number): string => `/api/v1/projects/${t.project_ids[0]!}/runs?per_page=25&created_by=${COLD_CREATOR + n}`;
const COLD_CREATOR = 1_000_000;

/** `count` replicas of this build over one private redis-server, with `config`; all stopped when `fn` ends. */
export async function withFleet<T>(em: Emulator, count: number, config: Record<string, unknown>, fn: (replicas: Server[]) => Promise<T>): Promise<T> {
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

/** One polling geometry: `keys` answers, each read by `screens` pollers (one token, staggered phases) every `everyMs`. */
interface PollShape {
  readonly name: string;
  /** Groups of keys polled together (a dashboard, or a team's screen): `keys` = groups × panels. */
  readonly groups: number;
  readonly panels: number;
  /** Pollers reading each group's keys, every `everyMs`, their phases `everyMs / screens` apart: 1 for a lone poller. */
  readonly screens: number;
  /** A number no other shape's pages use, so that each shape's keys are cold. */
  readonly firstPage: number;
}

interface PollSettings {
  readonly everyMs: number;
  readonly ttlMs: number;
  readonly seconds: number;
}

interface PollRun {
  readonly mode: string;
  readonly polls: number;
  readonly freshShare: number;
  /** Upstream requests over the measured window (after the warm-up). */
  readonly upstream: number;
  /** The measured window's length (ms): upstream requests per key over it give a key's refresh cycle. */
  readonly windowMs: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly hitP99Ms: number;
}

/**
 * Each group's pollers start at their own offset, spread evenly over one refresh cycle without
 * refresh-ahead (ttl + the poll gap), so that the keys' refreshes are spread over time rather than
 * in step: the window's counts are then a rate, not a matter of where its edges fall. The warm-up
 * (not measured) lasts until the last group has been polled for one freshness period.
 */
async function poll(em: Emulator, mode: string, refreshAhead: { enabled: boolean; startAt: number }, shape: PollShape, o: PollSettings): Promise<PollRun> {
  // The bench's generous budget: this measures refresh-ahead, not the learned budget's cautious start.
  const config = { ...BENCH_BUDGET, cache: { refreshAhead, freshness: { default: { ttlMs: o.ttlMs, staleWhileRevalidateMs: o.ttlMs } } } };
  const server = await startTmCache(em.url, { name: `tm-cache (${shape.name}, ${mode})`, config });
  const tokens = members(em);
  const pool = new Pool(server.url, { connections: shape.groups * shape.screens });
  const times: number[] = [];
  const hitTimes: number[] = [];
  let fresh = 0;
  const spreadMs = o.ttlMs + o.everyMs / shape.screens;
  try {
    await em.resetStats();
    const start = performance.now();
    const warmUntil = start + spreadMs + o.ttlMs;
    const end = start + o.seconds * 1000;
    let atWarm = 0;
    const warmed = new Promise<void>((resolve) =>
      setTimeout(
        () =>
          void instanceStats(em).then((s) => {
            atWarm = s.total;
            resolve();
          }),
        warmUntil - start,
      ),
    );
    await Promise.all(
      Array.from({ length: shape.groups * shape.screens }, async (_, poller) => {
        const group = Math.floor(poller / shape.screens);
        const screen = poller % shape.screens;
        const token = tokens[group % tokens.length]!;
        const offset = ((group + 0.5) / shape.groups) * spreadMs + (screen * o.everyMs) / shape.screens;
        for (let round = 0; ; round++) {
          const due = start + offset + round * o.everyMs;
          if (due >= end) break;
          await new Promise((r) => setTimeout(r, Math.max(0, due - performance.now())));
          for (let p = 0; p < shape.panels; p++) {
            const path = coldPath(token, shape.firstPage + group * 100 + p);
            const got = await timedGet(pool, path, { authorization: `Bearer ${token.token}` });
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
    await warmed;
    const upstream = (await instanceStats(em)).total - atWarm;
    const all = latencySummary(times);
    return {
      mode,
      polls: times.length,
      freshShare: fresh / Math.max(1, times.length),
      upstream,
      windowMs: end - warmUntil,
      p50Ms: all.p50Ms,
      p99Ms: all.p99Ms,
      hitP99Ms: latencySummary(hitTimes).p99Ms,
    };
  } finally {
    await pool.close();
    await server.proc.stop();
  }
}

/** Within 5 % of the floor a lone poller's refreshes cannot go below (see the note printed). */
const FLOOR_MARGIN = 1.05;
/** The bound where pollers share keys: upstream requests within 10 % of those without refresh-ahead. */
const SHARED_MAX_RATIO = 1.1;
/** Noise allowed between the p99 of every poll and the p99 of the hits of the same run. */
const P99_NOISE = 1.5;
const P99_NOISE_MS = 1;

/**
 * Polling dashboards, with and without refresh-ahead, in two geometries:
 * - lone pollers: each dashboard polls keys of its own. Without refresh-ahead a key is refilled
 *   at the first poll after it expired, a cycle of ttl + the poll gap (the poll at age ttl − δ is
 *   still fresh); to answer every poll fresh a refresh must land before that poll, a cycle of at
 *   most ttl. So no refresh-ahead can cost less than 1 + gap / ttl times the requests of waiting:
 *   1.25 at a 1 s poll and a 4 s ttl, 1.33 at the defaults' 30 s with a 10 s poll (less when the
 *   read due at expiry comes just after it: the floor checked is the one measured, off's cycle
 *   over ttl).
 * - shared panels: each key polled by several screens (one team, one service token) whose phases
 *   are staggered, so the gap between reads of a key is the poll period over the screens: the
 *   floor tends to 1, and the issue's "within 10 %" applies.
 */
export async function runFleetRefreshAheadScenario(
  em: Emulator,
  o: PollSettings & { lone: { dashboards: number; panels: number }; shared: { teams: number; screens: number; panels: number } },
): Promise<{ checks: Check[] }> {
  const shapes: PollShape[] = [
    { name: 'lone pollers', groups: o.lone.dashboards, panels: o.lone.panels, screens: 1, firstPage: 300_000 },
    { name: 'shared panels', groups: o.shared.teams, panels: o.shared.panels, screens: o.shared.screens, firstPage: 400_000 },
  ];
  const checks: Check[] = [];
  for (const shape of shapes) {
    const off = await poll(em, 'refresh-ahead off', { enabled: false, startAt: 0.75 }, shape, o);
    const on = await poll(em, 'refresh-ahead at 0.75 (default)', { enabled: true, startAt: 0.75 }, shape, o);
    const gapMs = o.everyMs / shape.screens;
    const keys = shape.groups * shape.panels;
    const cycleMs = (r: PollRun) => (r.windowMs * keys) / Math.max(1, r.upstream);
    // The floor as the geometry has it, and as measured: off's refresh cycle over the freshness
    // (a read due exactly at expiry may come just before it or just after, so off's cycle is
    // between ttl and ttl + gap).
    const geometryFloor = 1 + gapMs / o.ttlMs;
    const floor = Math.max(1, cycleMs(off) / o.ttlMs);
    const ratio = on.upstream / Math.max(1, off.upstream);
    printTable(
      `Polling dashboards, ${shape.name}: ${keys} keys, each polled by ${shape.screens} poller${shape.screens === 1 ? '' : 's'} every ${o.everyMs} ms (a read every ${fmt(gapMs, 0)} ms), for ${o.seconds} s; fresh ${o.ttlMs} ms then stale-while-revalidate; one replica`,
      [
        'mode',
        'polls after warm-up',
        'share fresh',
        'upstream requests after warm-up',
        'a key refreshed every, s',
        'vs off',
        'p50 ms',
        'p99 ms',
        "a hit's p99 ms",
      ],
      [off, on].map((r) => [
        r.mode,
        r.polls,
        fmt(r.freshShare, 4),
        r.upstream,
        fmt(cycleMs(r) / 1000, 3),
        fmt(r.upstream / Math.max(1, off.upstream), 3),
        fmt(r.p50Ms),
        fmt(r.p99Ms),
        fmt(r.hitP99Ms),
      ]),
      [
        `Without refresh-ahead a key is refilled at the first read after it expired: a cycle of ttl + up to the ${fmt(gapMs, 0)} ms gap (measured: ${fmt(cycleMs(off) / 1000, 3)} s).`,
        `To keep every read fresh a refresh must land before that read, a cycle of at most ttl: at least ${fmt(floor, 3)} times the requests as measured (1 + gap/ttl = ${fmt(geometryFloor, 3)} at most).`,
      ],
    );
    const costTarget = shape.screens === 1 ? floor * FLOOR_MARGIN : SHARED_MAX_RATIO;
    const p99Bound = Math.max(on.hitP99Ms * P99_NOISE, on.hitP99Ms + P99_NOISE_MS);
    checks.push(
      { name: `fleet-refresh-ahead, ${shape.name}: share of polls fresh`, value: on.freshShare, target: '≥ 0.99', pass: on.freshShare >= 0.99 },
      {
        name: `fleet-refresh-ahead, ${shape.name}: upstream vs off`,
        value: ratio,
        target: shape.screens === 1 ? `≤ ${fmt(costTarget, 3)} (floor ${fmt(floor, 3)} + 5 %)` : `≤ ${SHARED_MAX_RATIO} (floor ${fmt(floor, 3)})`,
        pass: ratio <= costTarget,
        unit: '×',
      },
      {
        name: `fleet-refresh-ahead, ${shape.name}: p99 poll latency`,
        value: on.p99Ms,
        target: `≈ a hit's (${fmt(on.hitP99Ms)} ms)`,
        pass: on.p99Ms <= p99Bound,
        unit: 'ms',
      },
    );
  }
  return { checks };
}
