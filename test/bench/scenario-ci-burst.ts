/**
 * Scenario "ci-burst": a CI fleet's first burst. 200 agents under 20 users (10 agents each, a
 * user's agents spread over the replicas) start at once against 3 tm-cache replicas sharing one
 * Redis (a private redis-server), each agent asking the same 10 questions about one project in
 * turn. Counted from the emulator's stats: what reached upstream, per route. Then the same burst
 * against 3 fresh replicas without Redis (memory only), for comparison.
 *
 * The true target: keys are per user (src/cache/key.ts: `u:<id>|...`; only verified admins share
 * the `admin` scope), so users sharing a project never share an entry: the floor is one upstream
 * request per distinct (user, question) = 20 × 10 = 200, plus one GET /user per token.
 */
import { Pool } from 'undici';
import { projectFacts, ciQuestions, latencySummary, tally, timedGet, type LatencySummary } from './questions.js';
import { fmt, printTable, type Check } from './report.js';
import { metricSum, startRedis, startTmCache, type Emulator, type Redis, type Server, type TokenInfo } from './servers.js';

const USER_ROUTE = 'GET /api/v1/user';

export interface BurstOptions {
  readonly agents: number;
  readonly users: number;
  readonly replicas: number;
}

export interface BurstRun {
  readonly mode: string;
  readonly requests: number;
  readonly ok: number;
  readonly statuses: Record<string, number>;
  /** Cache-Status of the answers (ttl left out), most frequent first. */
  readonly cacheStatuses: Record<string, number>;
  readonly upstreamTotal: number;
  /** Upstream requests other than GET /user: the questions (and any access confirmation). */
  readonly upstreamQuestions: number;
  readonly upstreamIdentity: number;
  readonly upstreamByRoute: Record<string, number>;
  readonly latency: LatencySummary;
  readonly wallMs: number;
  /** Summed over the replicas' /metrics after the burst: Redis errors and timeouts, identities read from Redis. */
  readonly redisErrors: number;
  readonly sharedIdentities: number;
}

export interface CiBurstScenario {
  readonly options: BurstOptions;
  readonly projectId: number;
  readonly questions: string[];
  /** One per distinct (user, question). */
  readonly target: number;
  readonly runs: BurstRun[];
  readonly checks: Check[];
}

/** `count` users with tokens who share one project, and that project (issuing tokens as needed). */
export async function usersSharingAProject(emulator: Emulator, count: number): Promise<{ projectId: number; users: TokenInfo[] }> {
  const issued: TokenInfo[] = [];
  // Users 6 on: the first five are the callers other scenarios and tests rely on.
  for (let next = 6; next < 6 + count * 8; next += count) {
    try {
      issued.push(...(await emulator.issueTokens(Array.from({ length: count }, (_, i) => next + i))));
    } catch {
      break; // past the last user (404)
    }
    const byProject = new Map<number, TokenInfo[]>();
    for (const t of issued.filter((t) => !t.is_admin)) for (const p of t.project_ids) byProject.set(p, [...(byProject.get(p) ?? []), t]);
    const best = [...byProject].sort((a, b) => b[1].length - a[1].length)[0];
    if (best && best[1].length >= count) return { projectId: best[0], users: best[1].slice(0, count) };
  }
  throw new Error(`no project shared by ${count} users among users 6..${6 + count * 8}`);
}

async function burst(mode: string, emulator: Emulator, replicas: Server[], users: TokenInfo[], questions: string[], options: BurstOptions): Promise<BurstRun> {
  const perReplica = Math.ceil(options.agents / replicas.length);
  const pools = replicas.map((r) => new Pool(r.url, { connections: perReplica, connect: { timeout: 30_000 } }));
  try {
    // Warm-up: connections and JIT of each replica, with the admin on another question.
    const admin = emulator.tokens.find((t) => t.is_admin)!;
    for (const pool of pools)
      for (let i = 0; i < 10; i++) await timedGet(pool, `/api/v1/projects?per_page=15&page=${i + 1}`, { authorization: `Bearer ${admin.token}` });
    await emulator.resetStats();
    const times: number[] = [];
    const statuses: string[] = [];
    const cacheStatuses: string[] = [];
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: options.agents }, async (_, agent) => {
        const user = users[agent % users.length]!;
        const pool = pools[agent % pools.length]!;
        for (const path of questions) {
          try {
            const got = await timedGet(pool, path, { authorization: `Bearer ${user.token}` });
            times.push(got.ms);
            statuses.push(String(got.status));
            cacheStatuses.push(got.cacheStatus.replace(/; ttl=-?\d+/, ''));
          } catch (err) {
            statuses.push(`error ${(err as { code?: string }).code ?? String(err).slice(0, 40)}`);
          }
        }
      }),
    );
    const wallMs = performance.now() - t0;
    const stats = await emulator.stats();
    const sumOver = async (name: string, labels?: string) => (await Promise.all(replicas.map((r) => metricSum(r, name, labels)))).reduce((a, b) => a + b, 0);
    const redisErrors = await sumOver('tm_cache_redis_errors_total');
    const sharedIdentities = await sumOver('tm_cache_identity_lookups_total', 'result="shared"');
    const upstreamIdentity = stats.by_route[USER_ROUTE] ?? 0;
    const counts = tally(statuses);
    return {
      mode,
      requests: statuses.length,
      ok: counts['200'] ?? 0,
      statuses: counts,
      cacheStatuses: Object.fromEntries(Object.entries(tally(cacheStatuses)).sort((a, b) => b[1] - a[1])),
      upstreamTotal: stats.total,
      upstreamQuestions: stats.total - upstreamIdentity,
      upstreamIdentity,
      upstreamByRoute: stats.by_route,
      latency: latencySummary(times),
      wallMs,
      redisErrors,
      sharedIdentities,
    };
  } finally {
    await Promise.all(pools.map((p) => p.close()));
  }
}

async function withReplicas<T>(emulator: Emulator, count: number, redis: Redis | undefined, fn: (replicas: Server[]) => Promise<T>): Promise<T> {
  const replicas: Server[] = [];
  try {
    for (let i = 0; i < count; i++) {
      replicas.push(
        await startTmCache(emulator.url, { name: `tm-cache replica ${i + 1}${redis ? ' (redis)' : ''}`, ...(redis ? { redisUrl: redis.url } : {}) }),
      );
    }
    return await fn(replicas);
  } finally {
    await Promise.all(replicas.map((r) => r.proc.stop()));
  }
}

export async function runCiBurstScenario(emulator: Emulator, options: BurstOptions): Promise<CiBurstScenario> {
  const { projectId, users } = await usersSharingAProject(emulator, options.users);
  const questions = ciQuestions(await projectFacts(emulator, projectId));
  for (const path of questions) {
    const res = await fetch(emulator.url + path, { headers: { authorization: `Bearer ${users[0]!.token}` } });
    if (res.status !== 200) throw new Error(`question ${path} → ${res.status} from the emulator for user ${users[0]!.user_id}`);
  }
  const runs: BurstRun[] = [];
  const redis = await startRedis();
  try {
    runs.push(
      await withReplicas(emulator, options.replicas, redis, (r) =>
        burst(`${options.replicas} replicas + shared Redis`, emulator, r, users, questions, options),
      ),
    );
  } finally {
    await redis.proc.stop();
  }
  runs.push(
    await withReplicas(emulator, options.replicas, undefined, (r) =>
      burst(`${options.replicas} replicas, memory only`, emulator, r, users, questions, options),
    ),
  );

  const target = options.users * questions.length;
  const [shared, alone] = [runs[0]!, runs[1]!];
  printTable(
    `9. CI burst: ${options.agents} agents under ${options.users} users (project ${projectId}) start at once, each asking the same ${questions.length} questions in turn, against ${options.replicas} tm-cache replicas on the server core`,
    [
      'setup',
      'client requests',
      '200s',
      'upstream total',
      'upstream questions',
      'upstream GET /user',
      'p50 ms',
      'p99 ms',
      'max ms',
      'wall ms',
      'Redis errors',
      'identities from Redis',
    ],
    runs.map((r) => [
      r.mode,
      r.requests,
      r.ok,
      r.upstreamTotal,
      r.upstreamQuestions,
      r.upstreamIdentity,
      fmt(r.latency.p50Ms),
      fmt(r.latency.p99Ms),
      fmt(r.latency.maxMs),
      fmt(r.wallMs, 0),
      r.mode.includes('Redis') ? r.redisErrors : 'n/a',
      r.mode.includes('Redis') ? r.sharedIdentities : 'n/a',
    ]),
    [
      `Target: one upstream request per distinct (user, question) = ${options.users} × ${questions.length} = ${target}. Keys are per user (src/cache/key.ts: scope u:<id>),`,
      `  so the ${options.users} users share no entry although they share the project: ${target} is the floor for any cache that keeps callers apart.`,
      `Without Redis each replica fills on its own: up to ${options.replicas} × ${target} = ${options.replicas * target} (measured ${alone.upstreamQuestions}, ${fmt(alone.upstreamQuestions / Math.max(1, shared.upstreamQuestions))}× the shared-Redis figure).`,
      ...runs.filter((r) => r.ok !== r.requests).map((r) => `${r.mode}: answers ${JSON.stringify(r.statuses)}`),
      '"Redis errors": tm_cache_redis_errors_total summed over the replicas (errors, commands past cache.redis.commandTimeoutMs,',
      '  calls skipped while the breaker was open): each such lookup or fill lock counts as a miss, and that replica fills by itself.',
      "GET /user: with Redis, a token's first look-up is coalesced across replicas (one per user; the others wait for the",
      '  identity it shares, at most cache.redis.lockWaitMs); without Redis each replica asks for itself: replicas × users.',
      ...runs.map((r) => `${r.mode}: upstream by route ${JSON.stringify(r.upstreamByRoute)}`),
      ...runs.map((r) => `${r.mode}: Cache-Status ${JSON.stringify(r.cacheStatuses)}`),
    ],
  );
  return {
    options,
    projectId,
    questions,
    target,
    runs,
    checks: [
      {
        name: `ci-burst: upstream questions, ${options.replicas} replicas + Redis`,
        value: shared.upstreamQuestions,
        target: `= ${target}`,
        pass: shared.upstreamQuestions === target,
        unit: '',
      },
      { name: `ci-burst: upstream GET /user, ${options.replicas} replicas + Redis`, value: shared.upstreamIdentity, target: 'info', pass: undefined, unit: '' },
      { name: 'ci-burst: share answered 200 (with Redis)', value: shared.ok / shared.requests, target: '≥ 1', pass: shared.ok === shared.requests },
      { name: 'ci-burst: p99 latency (with Redis)', value: shared.latency.p99Ms, target: 'info', pass: undefined, unit: 'ms' },
      {
        name: `ci-burst: upstream questions, ${options.replicas} replicas memory only`,
        value: alone.upstreamQuestions,
        target: `≤ ${options.replicas * target} (info)`,
        pass: undefined,
        unit: '',
      },
      { name: 'ci-burst: p99 latency (memory only)', value: alone.latency.p99Ms, target: 'info', pass: undefined, unit: 'ms' },
    ],
  };
}
