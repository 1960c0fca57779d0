/**
 * The first minute of a fleet at tm-cache's defaults (the first-minute scenario's figures 3 and 4,
 * and the rollout), replicas sharing a private redis-server, the instance's limit never given:
 * 3. a CI fleet's first burst: 200 agents, each asking a few of its user's questions, retrying
 *    tm-cache's 429s after their Retry-After, against an instance that locks out;
 * 4. a fleet started while the instance locks the account out, dashboards polling through it: how
 *    soon after the lockout's end the instance serves at 80 % of its limit, and whether it stays;
 * rollout: two replicas restarted in turn under polling, against the same polling before.
 */
import { Pool } from 'undici';
import { setTimeout as sleep } from 'node:timers/promises';
import { DEFAULTS } from './first-minute-dashboards.js';
import {
  get,
  isFromCache,
  LIMIT_RPS,
  loadPanels,
  lockingInstance,
  PLAIN_INSTANCE,
  sample,
  sampleUntil,
  servedPerS,
  tallyStatuses,
  type Answer,
  type Sample,
} from './first-minute-load.js';
import { ciQuestions, dashboardPanels, type ProjectFacts } from './questions.js';
import { withFleet } from './scenario-fleet.js';
import { startRedis, startTmCache, type Emulator, type Server, type TokenInfo } from './servers.js';

const POLL_MS = 10_000;
/** A user's dashboard: the 12 panels (questions.ts dashboardPanels) of one project they see. */
export interface Dashboard {
  readonly user: TokenInfo;
  readonly facts: ProjectFacts;
}
const panelsOf = (d: Dashboard): string[] => {
  const { shared, own } = dashboardPanels(d.facts, d.user.user_id);
  return [...shared, ...own];
};

export interface CiMinute {
  readonly agents: number;
  readonly users: number;
  readonly replicas: number;
  readonly questionsPerAgent: number;
  readonly clientRequests: number;
  /** Distinct (user, question) pairs asked: keys are per user at the defaults. */
  readonly distinctQuestions: number;
  /** What any cache keeping callers apart must send: each distinct question once, one GET /user per user. */
  readonly distinctUpstream: number;
  readonly floorS: number;
  readonly targetS: number;
  /** Until the last agent had all its answers; NaN when some agent gave up at the deadline. */
  readonly doneS: number;
  readonly agentsDone: number;
  readonly upstream: number;
  readonly instance429s: number;
  readonly lockouts: number;
  /** 429s and 503s from tm-cache, each retried after its Retry-After. */
  readonly retried: number;
  readonly statuses: Record<string, number>;
}

const CI_QUESTIONS_PER_AGENT = 3;
/** Five of a user's own dashboard questions beside the CI job's ten: 15 per user, 300 for 20 users. */
const ciQuestionsOf = (facts: ProjectFacts, user: TokenInfo): string[] => [...ciQuestions(facts), ...dashboardPanels(facts, user.user_id).own.slice(0, 5)];

/** Agent a runs as user a mod users and asks 3 consecutive questions of that user's 15, from 3 × ⌊a ÷ users⌋. */
export async function ciFirstBurst(
  em: Emulator,
  facts: ProjectFacts,
  users: TokenInfo[],
  o: { agents: number; replicas: number; deadlineS: number },
): Promise<CiMinute> {
  const asked = Array.from({ length: o.agents }, (_, a) => {
    const user = users[a % users.length]!;
    const questions = ciQuestionsOf(facts, user);
    const first = CI_QUESTIONS_PER_AGENT * Math.floor(a / users.length);
    return { user, paths: Array.from({ length: CI_QUESTIONS_PER_AGENT }, (_, i) => questions[(first + i) % questions.length]!) };
  });
  const distinctQuestions = new Set(asked.flatMap((x) => x.paths.map((p) => `${x.user.user_id} ${p}`))).size;
  const distinctUpstream = distinctQuestions + new Set(asked.map((x) => x.user.user_id)).size;
  const floorS = distinctUpstream / LIMIT_RPS;
  return withFleet(em, o.replicas, DEFAULTS, async (replicas) => {
    const pools = replicas.map((r) => new Pool(r.url, { connections: Math.ceil(o.agents / replicas.length) }));
    try {
      await em.faults(lockingInstance(5, 60));
      await em.resetStats();
      const t0 = performance.now();
      const deadline = t0 + o.deadlineS * 1_000;
      const finals: Answer[] = [];
      const doneAt: number[] = [];
      let retried = 0;
      await Promise.all(
        asked.map(async ({ user, paths }, a) => {
          const pool = pools[a % pools.length]!;
          let ok = 0;
          for (const path of paths) {
            for (;;) {
              const answer = await get(pool, path, user.token);
              const waitMs = Math.max(100, (answer.retryAfterS ?? 1) * 1_000);
              if ((answer.status === 429 || answer.status === 503) && performance.now() + waitMs < deadline) {
                retried++;
                await sleep(waitMs);
                continue;
              }
              finals.push(answer);
              if (answer.status === 200) ok++;
              break;
            }
          }
          if (ok === paths.length) doneAt.push(performance.now() - t0);
        }),
      );
      const stats = await em.stats();
      return {
        agents: o.agents,
        users: users.length,
        replicas: o.replicas,
        questionsPerAgent: CI_QUESTIONS_PER_AGENT,
        clientRequests: finals.length,
        distinctQuestions,
        distinctUpstream,
        floorS,
        targetS: 1.5 * floorS + 2,
        doneS: doneAt.length === o.agents ? Math.max(...doneAt) / 1_000 : NaN,
        agentsDone: doneAt.length,
        upstream: stats.total,
        instance429s: stats.rate_limited,
        lockouts: stats.lockouts,
        retried,
        statuses: tallyStatuses(finals),
      };
    } finally {
      await Promise.all(pools.map((p) => p.close()));
    }
  });
}

interface Poll extends Answer {
  readonly atMs: number;
}

/**
 * Each dashboard polls its 12 panels (six at a time) every 10 s from its own phase until `untilMs`,
 * each poll through the replica `route` names at that moment (a load balancer's pick).
 */
async function pollDashboards(dashboards: Dashboard[], route: (poll: number) => Pool, untilMs: number): Promise<Poll[]> {
  const polls: Poll[] = [];
  const t0 = performance.now();
  let n = 0;
  await Promise.all(
    dashboards.map(async (d, i) => {
      const panels = panelsOf(d);
      for (let k = 0; ; k++) {
        const due = t0 + (i * POLL_MS) / dashboards.length + k * POLL_MS;
        if (due >= untilMs) return;
        await sleep(Math.max(0, due - performance.now()));
        const atMs = performance.now();
        const load = await loadPanels(route(n++), panels, d.user.token);
        polls.push(...load.answers.map((a) => ({ ...a, atMs })));
      }
    }),
  );
  return polls;
}

export interface LockoutStart {
  readonly dashboards: number;
  readonly replicas: number;
  readonly lockoutS: number;
  /** Seconds of lockout left when the last replica was ready. */
  readonly lockoutLeftS: number;
  /** Seconds after the lockout's end until a one-second window served ≥ 80 % of the limit; NaN: never. */
  readonly recoverS: number;
  /** The instance's 200s per second from 10 s after the lockout's end to the end of the run. */
  readonly sustainedRps: number;
  readonly sustainedWindowS: number;
  /** Served per second in each second after the lockout's end. */
  readonly perSecond: number[];
  readonly lockouts: number;
  readonly instance429s: number;
  readonly clientStatusesInWindow: Record<string, number>;
}

/** Drives the instance into its lockout (its burst and a few more at once); when the lockout ends (performance.now()). */
async function provokeLockout(em: Emulator, lockoutS: number): Promise<number> {
  const admin = em.tokens.find((t) => t.is_admin)!;
  const pool = new Pool(em.url, { connections: LIMIT_RPS + 10 });
  try {
    for (let attempt = 0; attempt < 5; attempt++) {
      const refusedAt: number[] = [];
      await Promise.all(
        Array.from({ length: LIMIT_RPS + 10 }, async () => {
          if ((await get(pool, '/api/v1/user', admin.token)).status === 429) refusedAt.push(performance.now());
        }),
      );
      // The third 429 within a minute begins the lockout: the third answered is the closest to it.
      if ((await em.stats()).lockouts > 0 && refusedAt.length >= 3) return refusedAt.sort((a, b) => a - b)[2]! + lockoutS * 1_000;
    }
  } finally {
    await pool.close();
  }
  throw new Error('the emulator did not lock out');
}

export async function fleetDuringLockout(
  em: Emulator,
  dashboards: Dashboard[],
  o: { replicas: number; lockoutS: number; afterS: number; recoverWithinS: number },
): Promise<LockoutStart> {
  await em.faults(lockingInstance(LIMIT_RPS, o.lockoutS));
  const endsAt = await provokeLockout(em, o.lockoutS);
  await em.resetStats();
  return withFleet(em, o.replicas, DEFAULTS, async (replicas) => {
    const lockoutLeftS = (endsAt - performance.now()) / 1_000;
    const pools = replicas.map((r) => new Pool(r.url, { connections: 64 }));
    try {
      const until = endsAt + o.afterS * 1_000;
      const [polls, samples] = await Promise.all([pollDashboards(dashboards, (n) => pools[n % pools.length]!, until), sampleUntil(em, 250, until)]);
      const last = samples[samples.length - 1]!;
      const windowFrom = endsAt + o.recoverWithinS * 1_000;
      const from = samples.find((s) => s.atMs >= windowFrom) ?? last;
      return {
        dashboards: dashboards.length,
        replicas: o.replicas,
        lockoutS: o.lockoutS,
        lockoutLeftS,
        recoverS: recoveredAfterS(samples, endsAt),
        sustainedRps: servedPerS(from, last),
        sustainedWindowS: (last.atMs - from.atMs) / 1_000,
        perSecond: perSecondAfter(samples, endsAt),
        lockouts: last.lockouts,
        instance429s: last.rateLimited,
        clientStatusesInWindow: tallyStatuses(polls.filter((p) => p.atMs >= windowFrom)),
      };
    } finally {
      await Promise.all(pools.map((p) => p.close()));
    }
  });
}

/** The end of the first window of ≥ 1 s, wholly after `endsAt`, in which the instance served ≥ 80 % of its limit. */
function recoveredAfterS(samples: readonly Sample[], endsAt: number): number {
  for (const b of samples) {
    const a = [...samples].reverse().find((s) => s.atMs <= b.atMs - 1_000 && s.atMs >= endsAt);
    if (a && servedPerS(a, b) >= 0.8 * LIMIT_RPS) return (b.atMs - endsAt) / 1_000;
  }
  return NaN;
}

/** Served per second in each whole second after `endsAt` (between the samples nearest its edges). */
function perSecondAfter(samples: readonly Sample[], endsAt: number): number[] {
  const nearest = (t: number): Sample => samples.reduce((best, s) => (Math.abs(s.atMs - t) < Math.abs(best.atMs - t) ? s : best));
  const out: number[] = [];
  for (let s = 0; endsAt + (s + 1) * 1_000 <= samples[samples.length - 1]!.atMs + 125; s++) {
    out.push(Math.round(servedPerS(nearest(endsAt + s * 1_000), nearest(endsAt + (s + 1) * 1_000))));
  }
  return out;
}

export interface Rollout {
  readonly dashboards: number;
  readonly windowS: number;
  readonly upstreamBefore: number;
  readonly upstreamDuring: number;
  readonly pollsDuring: number;
  readonly fromCacheShare: number;
  readonly errorsDuring: number;
  readonly statusesDuring: Record<string, number>;
}

/**
 * Two replicas + Redis behind a round-robin balancer, dashboards polling: after `warmS`, the
 * upstream requests of one window; then replica 1 is taken out, stopped and started again, and
 * half a window later replica 2: the upstream requests and polls of that second window.
 */
export async function rolloutUnderPolling(em: Emulator, dashboards: Dashboard[], o: { warmS: number; windowS: number }): Promise<Rollout> {
  const redis = await startRedis();
  const start = (i: number): Promise<Server> => startTmCache(em.url, { name: `tm-cache rollout ${i + 1}`, redisUrl: redis.url, config: DEFAULTS });
  const live: { server: Server; pool: Pool }[] = [];
  const stopped: Promise<void>[] = [];
  try {
    for (let i = 0; i < 2; i++) {
      const server = await start(i);
      live.push({ server, pool: new Pool(server.url, { connections: 64 }) });
    }
    await em.faults(PLAIN_INSTANCE);
    await em.resetStats();
    const t0 = performance.now();
    const windowMs = o.windowS * 1_000;
    const until = t0 + o.warmS * 1_000 + 2 * windowMs;
    const restart = async (i: number): Promise<void> => {
      const [old] = live.splice(i, 1);
      await old!.server.proc.stop();
      stopped.push(old!.pool.close());
      const server = await start(i);
      live.splice(i, 0, { server, pool: new Pool(server.url, { connections: 64 }) });
    };
    const control = (async () => {
      await sleep(o.warmS * 1_000);
      const s0 = await sample(em);
      await sleep(Math.max(0, s0.atMs + windowMs - performance.now()));
      const s1 = await sample(em);
      await restart(0);
      await sleep(Math.max(0, s1.atMs + windowMs / 2 - performance.now()));
      await restart(1);
      await sleep(Math.max(0, s1.atMs + windowMs - performance.now()));
      return [s0, s1, await sample(em)] as const;
    })();
    const [polls, [s0, s1, s2]] = await Promise.all([pollDashboards(dashboards, (n) => live[n % live.length]!.pool, until), control]);
    const during = polls.filter((p) => p.atMs >= s1.atMs && p.atMs < s2.atMs);
    const errorsDuring = during.filter((p) => p.status !== 200 && p.status !== 304).length;
    return {
      dashboards: dashboards.length,
      windowS: o.windowS,
      upstreamBefore: s1.total - s0.total,
      upstreamDuring: s2.total - s1.total,
      pollsDuring: during.length,
      fromCacheShare: during.filter(isFromCache).length / Math.max(1, during.length),
      errorsDuring,
      statusesDuring: tallyStatuses(during),
    };
  } finally {
    await Promise.all(live.map(async ({ server, pool }) => (await server.proc.stop(), await pool.close())));
    await Promise.all(stopped);
    await redis.proc.stop();
  }
}
