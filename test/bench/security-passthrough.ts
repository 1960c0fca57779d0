/**
 * Security scenario, part (e): a passthrough flood. What tm-cache passes through to the instance
 * (requests without a credential, cache-busters with an unknown parameter, writes) must keep
 * within the fleet's budget, or one client locks the instance's account out for every member.
 *
 * Each flood has a fleet of its own: two replicas of this build over a private redis-server,
 * `upstream.budget` 10 req/s (burst 5), in front of the emulator limited like an account (20 req/s,
 * burst 10, Retry-After 1 s; the 3rd 429 within a minute locks the account out for 600 s). The
 * flood is 60 requests to replica 1, ten at a time; then a second member's cold miss on replica
 * 2. The instance's figures (busiest second, 429s, lockouts) cover the flood and the miss; the
 * limit is set anew before each flood (a full bucket, no lockout) and its stats reset. The fleet's
 * rate is replica 2's `tm_cache_upstream_budget_rate` gauge, read at once and again 60 s after its
 * flood ended: each fleet stays up, idle, while the next floods run on theirs.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { request } from 'undici';
import { drive, type Ask } from './questions.js';
import { fmt, printTable, type Check } from './report.js';
import { instanceStats, withFleet, type InstanceStats } from './scenario-fleet.js';
import { metricSum, type Emulator, type Server, type TokenInfo } from './servers.js';

const BUDGET = { requestsPerSecond: 10, burst: 5 };
const ACCOUNT_LIMIT = { requests_per_s: 20, burst: 10, retry_after_s: 1, escalate_after: 3, lockout_s: 600 };
const FLOOD_REQUESTS = 60;
const AT_ONCE = 10;
const LATER_MS = 60_000;
/** The most a budget of rate r and burst b lets through in any second (fleet-budget.ts, "Accounting"). */
const BUSIEST_MAX = BUDGET.requestsPerSecond + BUDGET.burst;
/** The fleet's rate a minute later, unpunished: the configured budget (a fixed budget starts there and never climbs past it). */
const RATE_MIN = BUDGET.requestsPerSecond * 0.9;
const RATE_GAUGE = 'tm_cache_upstream_budget_rate';
const PAUSE_GAUGE = 'tm_cache_upstream_budget_paused_seconds';

interface Flood {
  readonly label: string;
  readonly ask: (i: number) => Ask;
}

export interface PassthroughFloodFigure {
  readonly flood: string;
  /** tm-cache's answers to the flood, by status. */
  readonly answered: Record<string, number>;
  readonly instance: InstanceStats;
  /** The second member's cold miss on replica 2: its status, and its Retry-After when refused. */
  readonly coldMiss: string;
  readonly rateAtOnceRps: number;
  readonly rateLaterRps: number;
  readonly pausedLaterS: number;
}

function floodsOf(flooder: TokenInfo): Flood[] {
  const bearer = `Bearer ${flooder.token}`;
  return [
    { label: 'e1: GET without Authorization', ask: () => ({ path: '/api/v1/projects/1/runs' }) },
    {
      label: "e2: a member's GETs with a cache-buster ?_=<n>",
      ask: (i) => ({ path: `/api/v1/projects/${flooder.project_ids[0]!}/runs?_=${i}`, authorization: bearer }),
    },
    { label: "e3: a member's PUT /api/v1/runs/<id> {}", ask: (i) => ({ method: 'PUT', path: `/api/v1/runs/${i + 1}`, authorization: bearer, body: '{}' }) },
  ];
}

/** One GET with its body read whole: the status, with the Retry-After of a 429. */
async function coldMiss(server: Server, path: string, token: string): Promise<string> {
  try {
    const res = await request(`${server.url}${path}`, { headers: { authorization: `Bearer ${token}` }, headersTimeout: 60_000, bodyTimeout: 60_000 });
    await res.body.dump();
    const retryAfter = res.headers['retry-after'];
    return res.statusCode === 429 ? `429 (Retry-After ${String(retryAfter)})` : String(res.statusCode);
  } catch (err) {
    return `error ${(err as { code?: string }).code ?? String(err).slice(0, 40)}`;
  }
}

/**
 * Floods `floods[i]` on a fleet of its own, then the ones after it (each on its own fleet) while
 * this fleet idles; reads this fleet's rate LATER_MS after its flood ended, then stops it.
 */
async function floodInTurn(em: Emulator, floods: readonly Flood[], i: number, victim: TokenInfo, out: PassthroughFloodFigure[]): Promise<void> {
  const flood = floods[i];
  if (flood === undefined) return;
  await withFleet(em, 2, { upstream: { budget: BUDGET } }, async ([one, two]) => {
    // A fresh limit is a full bucket and no lockout; the replicas' start (their readiness probe) is not counted.
    await em.faults({ rate_limit: ACCOUNT_LIMIT });
    await em.resetStats();
    const answered = await drive(one!.url, FLOOD_REQUESTS, AT_ONCE, flood.ask);
    const endedAt = performance.now();
    const miss = await coldMiss(two!, `/api/v1/projects/${victim.project_ids[0]!}/runs?per_page=25&created_by=${3_000_000 + i}`, victim.token);
    const instance = await instanceStats(em);
    const rateAtOnceRps = await metricSum(two!, RATE_GAUGE);
    await em.faults({});
    await floodInTurn(em, floods, i + 1, victim, out);
    await sleep(Math.max(0, endedAt + LATER_MS - performance.now()));
    const [rateLaterRps, pausedLaterS] = [await metricSum(two!, RATE_GAUGE), await metricSum(two!, PAUSE_GAUGE)];
    out[i] = { flood: flood.label, answered, instance, coldMiss: miss, rateAtOnceRps, rateLaterRps, pausedLaterS };
  });
}

/** Part (e): the three floods, their table, and five checks each. */
export async function runPassthroughFloods(
  em: Emulator,
  flooder: TokenInfo,
  victim: TokenInfo,
): Promise<{ figures: PassthroughFloodFigure[]; checks: Check[] }> {
  const figures: PassthroughFloodFigure[] = [];
  try {
    await floodInTurn(em, floodsOf(flooder), 0, victim, figures);
  } finally {
    await em.faults({});
  }
  printTable(
    `6e. Passthrough floods: ${FLOOD_REQUESTS} requests ${AT_ONCE} at a time to replica 1 of 2 (Redis), budget ${BUDGET.requestsPerSecond} req/s burst ${BUDGET.burst}; the instance ${ACCOUNT_LIMIT.requests_per_s} req/s burst ${ACCOUNT_LIMIT.burst}, lockout ${ACCOUNT_LIMIT.lockout_s} s after ${ACCOUNT_LIMIT.escalate_after} 429s in a minute`,
    [
      'flood',
      'tm-cache answered',
      'instance requests',
      'busiest second',
      'instance 429s',
      'lockouts',
      'cold miss, replica 2',
      'fleet rate at once',
      'a minute later',
      'paused then (s)',
    ],
    figures.map((f) => [
      f.flood,
      JSON.stringify(f.answered),
      f.instance.total,
      f.instance.peak_per_s,
      f.instance.rate_limited,
      f.instance.lockouts,
      f.coldMiss,
      fmt(f.rateAtOnceRps),
      fmt(f.rateLaterRps),
      fmt(f.pausedLaterS, 0),
    ]),
    [
      "instance figures: the flood and the cold miss after it (a second member's never-asked page on replica 2), from the emulator's stats.",
      `fleet rate: replica 2's ${RATE_GAUGE} (req/s) just after the cold miss, and ${LATER_MS / 1_000} s after the flood ended, each flood's fleet idle meanwhile (the next floods run on fleets of their own).`,
    ],
  );
  const checks = figures.flatMap((f): Check[] => {
    const part = f.flood.slice(0, f.flood.indexOf(':'));
    const coldStatus = Number.parseInt(f.coldMiss, 10);
    return [
      {
        name: `security: instance requests in the busiest second (${part})`,
        value: f.instance.peak_per_s,
        unit: 'req/s',
        target: `≤ ${BUSIEST_MAX}`,
        pass: f.instance.peak_per_s <= BUSIEST_MAX,
      },
      { name: `security: instance 429s (${part})`, value: f.instance.rate_limited, unit: '', target: '= 0', pass: f.instance.rate_limited === 0 },
      { name: `security: lockouts (${part})`, value: f.instance.lockouts, unit: '', target: '= 0', pass: f.instance.lockouts === 0 },
      { name: `security: cold miss on replica 2 after the flood (${part})`, value: coldStatus, unit: '', target: '= 200', pass: coldStatus === 200 },
      {
        name: `security: fleet rate a minute after the flood (${part})`,
        value: f.rateLaterRps,
        unit: 'req/s',
        target: `≥ ${fmt(RATE_MIN, 0)}`,
        pass: f.rateLaterRps >= RATE_MIN,
      },
    ];
  });
  return { figures, checks };
}
