/**
 * Every scenario `npm run bench` knows, by name: what it measures, what it needs on the machine,
 * and how it reads its knobs (options.ts) with their full and short defaults. The suite (run when
 * no name is given) is the scenarios whose figures the README's generated table shows; the others
 * are A/B comparisons with another build (`ab:*`), profiles (`profile:*`) and single measurements.
 */
import { runAbAccessLog } from './access-log-ab.js';
import { runTraceScenario } from './scenario-trace.js';
import { runAbHit } from './ab.js';
import { runCodec } from './codec.js';
import { DECODE_SOURCE, runAbDecode } from './decode-ab.js';
import { runEmulatorMicro } from './emulator.js';
import type { Binary } from './guards.js';
import { requireBase } from './guards.js';
import type { LoadOptions, Page } from './measure.js';
import { runAbMiss } from './miss-ab.js';
import type { Options } from './options.js';
import { makeNginxPassConf, startNginx } from './peers.js';
import { freePort } from './procs.js';
import { PROFILE_MODES, runProfile } from './profile.js';
import { runAbRedis } from './redis-ab.js';
import type { Check } from './report.js';
import { runRevocation } from './revocation.js';
import { runCapacityScenario } from './scenario-capacity.js';
import { runCiBurstScenario } from './scenario-ci-burst.js';
import { runDashboardsScenario } from './scenario-dashboards.js';
import { runFirstMinuteScenario } from './scenario-first-minute.js';
import { runFleetBudgetScenario, runFleetLearnScenario, runFleetRefreshAheadScenario } from './scenario-fleet.js';
import { runTeamDashboardsScenario } from './scenario-team-dashboards.js';
import { runTeamDerivedScenario } from './scenario-team-derived.js';
import { runEmulatorScenario } from './scenario-emulator.js';
import { runHitScenario } from './scenario-hit.js';
import { runCoalesceScenario, runMissScenario } from './scenario-miss.js';
import { runRedisScenario } from './scenario-redis.js';
import { runSecurityScenario } from './scenario-security.js';
import { BENCH_BUDGET, SERVER_CPU, startBareProxy, startTmCache, type Emulator } from './servers.js';

export interface BenchContext {
  readonly options: Options;
  /** A private temporary folder, removed at the end. */
  readonly dir: string;
  /** The emulator every scenario shares (medium, seed 42, on the load core), started on first use. */
  emulator(): Promise<Emulator>;
  /** The measured page: a member's 100-run page with users expanded (measure.ts choosePage). */
  page(): Promise<Page>;
}

export interface ScenarioResult {
  /** The figures held to a target (or shown for information) in the summary and the README. */
  readonly checks: Check[];
}

export interface Scenario {
  readonly name: string;
  readonly about: string;
  /** Run by a bare `npm run bench`, and shown in the README's generated table. */
  readonly suite: boolean;
  readonly needs: readonly Binary[];
  /** Starts this checkout's dist/cli.js (the emulator included). */
  readonly build: boolean;
  /** The upstream budget its tm-caches run with, and why: printed when it starts. Absent: it starts none. */
  readonly budget?: string;
  run(ctx: BenchContext): Promise<ScenarioResult>;
}

/** Most scenarios: the bench's fixed budget (servers.ts BENCH_BUDGET), and why. */
const FIXED_BUDGET =
  `fixed at ${BENCH_BUDGET.upstream.budget.requestsPerSecond.toLocaleString('en-US')} req/s (the bench's BENCH_BUDGET, servers.ts), a rate no scenario reaches: ` +
  "this scenario measures the cache, not the learned budget's start (10 req/s, a bucket of 5, growing); first-minute measures tm-cache at its defaults";
/** The A/B scenarios: both builds get the bench's budget. */
const AB_BUDGET = `both builds' ${FIXED_BUDGET.replace(/; first-minute.*/, '')}`;

const HIT_CONNECTIONS = 32;

/** The cache-hit load of the suite: --duration (12 s, short 4) in --rounds (4, short 2) after --warmup (2 s, short 1). */
function suiteLoad(o: Options): LoadOptions {
  return { connections: HIT_CONNECTIONS, durationS: o.number('duration', 12, 4), warmupS: o.number('warmup', 2, 1), rounds: o.number('rounds', 4, 2) };
}

async function withEmulator(ctx: BenchContext): Promise<[Emulator, Page]> {
  return [await ctx.emulator(), await ctx.page()];
}

const SUITE: Scenario[] = [
  {
    name: 'hit',
    budget: FIXED_BUDGET,
    about:
      "memory hit of the 100-run page by CPU per hit: tm-cache (access log off and on, identity and gzip clients) against Node's floor (a bare node:http server replaying tm-cache's answer), bare fastify, Varnish, nginx proxy_cache (32 connections, rotating rounds)",
    suite: true,
    needs: ['wrk'],
    build: true,
    run: async (ctx) => {
      const [em, page] = await withEmulator(ctx);
      // More, shorter rounds than the other scenarios: the verdict is the median of per-round ratios.
      const o = ctx.options;
      return runHitScenario(ctx.dir, em, page, { ...suiteLoad(o), durationS: o.number('duration', 16, 4), rounds: o.number('rounds', 8, 2) });
    },
  },
  {
    name: 'miss',
    budget: FIXED_BUDGET,
    about:
      'distinct cold questions: emulator directly, nginx proxy_pass, the bare node proxy, tm-cache; then 1,000 concurrent identical cold requests (coalescing)',
    suite: true,
    needs: [],
    build: true,
    run: async (ctx) => {
      const [em, page] = await withEmulator(ctx);
      const proxy = await startTmCache(em.url, { name: 'tm-cache (miss)' });
      const nginx = await startNginx(
        ctx.dir,
        await freePort(),
        { host: '127.0.0.1', port: Number(new URL(em.url).port) },
        SERVER_CPU,
        makeNginxPassConf,
        'nginx proxy_pass',
      );
      if (typeof nginx === 'string') console.log(`   nginx proxy_pass baseline skipped: ${nginx}`);
      const bare = await startBareProxy(em.url);
      const miss = await runMissScenario(em, proxy, page, ctx.options.number('miss-pairs', 300, 60), typeof nginx === 'string' ? undefined : nginx, bare);
      const coalesce = await runCoalesceScenario(em, proxy, page, ctx.options.number('coalesce', 1_000, 200));
      return { miss, coalesce, checks: [...miss.checks, ...coalesce.checks] };
    },
  },
  {
    name: 'redis',
    budget: FIXED_BUDGET,
    about: 'Redis tier: a Redis-tier hit against a memory hit (identity and gzip clients), bytes stored per entry, memory hits with Redis on',
    suite: true,
    needs: ['wrk', 'redis-server', 'redis-cli'],
    build: true,
    run: async (ctx) => {
      const [em, page] = await withEmulator(ctx);
      const load = suiteLoad(ctx.options);
      return runRedisScenario(em, page, {
        ...load,
        durationS: ctx.options.number('redis-duration', Math.min(load.durationS, 9)),
        rounds: Math.min(load.rounds, 3),
      });
    },
  },
  {
    name: 'emulator',
    about: "the emulator's own cost: generation per scale, CPU per 100-run page in the handler and over HTTP",
    suite: true,
    needs: ['wrk'],
    build: true,
    run: async (ctx) => {
      const [em, page] = await withEmulator(ctx);
      return runEmulatorScenario(ctx.dir, em, page, ctx.options.short ? 2 : 4, ctx.options.short ? 300 : 3_000);
    },
  },
  {
    name: 'dashboards',
    budget: FIXED_BUDGET,
    about: '50 dashboards × 4 users polling 12 panels, time compressed (--dash-scale): offload, latency, bytes, delay until a change shows',
    suite: true,
    needs: [],
    build: true,
    run: (ctx) =>
      runDashboardsScenario(ctx.dir, {
        dashboards: 50,
        usersPerDashboard: 4,
        scale: ctx.options.number('dash-scale', 0.2),
        periods: ctx.options.number('dash-periods', 3, 1),
        conditionalShare: 0.5,
      }),
  },
  {
    name: 'team-dashboards',
    budget: FIXED_BUDGET,
    about:
      'one team of 2, 5, 10 members polling the same 12 panels with their own tokens, cache.sharing user vs project, time compressed (--team-scale): upstream per freshness period against the floor, offload, delay until a change shows',
    suite: true,
    needs: [],
    build: true,
    run: (ctx) =>
      runTeamDashboardsScenario(ctx.dir, {
        teams: [2, 5, 10],
        scale: ctx.options.number('team-scale', 0.2),
        periods: ctx.options.number('team-periods', 3, 1),
      }),
  },
  {
    name: 'team-derived',
    budget: FIXED_BUDGET,
    about:
      'one team of 10 polling 12 panels that overlap (a list and its items, a page at two sizes), derived answers off and on, cache.sharing user and project, time compressed (--team-scale): upstream per freshness period, offload against the per-question ceiling',
    suite: false,
    needs: [],
    build: true,
    run: (ctx) =>
      runTeamDerivedScenario(ctx.dir, {
        teams: [10],
        scale: ctx.options.number('team-scale', 0.2),
        periods: ctx.options.number('team-periods', 3, 1),
      }),
  },
  {
    name: 'capacity',
    budget: FIXED_BUDGET,
    about: "one core's capacity for a 90 % fresh / 9 % stale / 1 % miss mix: tm-cache against Varnish and nginx proxy_cache",
    suite: true,
    needs: ['wrk'],
    build: true,
    run: async (ctx) =>
      runCapacityScenario(ctx.dir, await ctx.emulator(), {
        durationS: ctx.options.number('capacity-s', 12, 4),
        rounds: 2,
        staleCount: ctx.options.number('capacity-stale', 3_000, 500),
      }),
  },
  {
    name: 'ci-burst',
    budget: FIXED_BUDGET,
    about: "a CI fleet's first burst (200 agents, 20 users) against 3 replicas, with a shared Redis and memory only: upstream requests",
    suite: true,
    needs: ['redis-server'],
    build: true,
    run: async (ctx) =>
      runCiBurstScenario(await ctx.emulator(), { agents: ctx.options.number('ci-agents', 200, 40), users: ctx.options.number('ci-users', 20, 4), replicas: 3 }),
  },
  {
    name: 'fleet-budget',
    budget: 'its own, fixed at 40 req/s with a burst of 40: what it measures is a fleet kept within a known budget',
    about:
      "a CI fleet against a known budget: 200 agents asking distinct cold questions on 40 req/s (burst 40), 3 replicas + Redis: the instance's peak per second, no client 5xx",
    suite: true,
    needs: ['redis-server'],
    build: true,
    run: async (ctx) =>
      runFleetBudgetScenario(await ctx.emulator(), {
        agents: ctx.options.number('fleet-agents', 200, 50),
        rps: 40,
        burst: 40,
        seconds: ctx.options.number('fleet-s', 20, 8),
      }),
  },
  {
    name: 'fleet-learn',
    budget: 'none configured (requestsPerSecond 0, the default): the learned budget is what it measures',
    about:
      'an unknown limit: the instance at 20 req/s escalating after 3 429s, no budget configured, 3 replicas + Redis: no lockout, sustained rate ≥ 80 % of the limit',
    suite: true,
    needs: ['redis-server'],
    build: true,
    run: async (ctx) =>
      runFleetLearnScenario(await ctx.emulator(), {
        agents: ctx.options.number('fleet-agents', 60, 30),
        limitRps: 20,
        seconds: ctx.options.number('fleet-learn-s', 60, 30),
      }),
  },
  {
    name: 'fleet-refresh-ahead',
    budget: FIXED_BUDGET,
    about:
      "polling dashboards with and without refresh-ahead, lone pollers and panels shared by 5 screens: share of polls fresh, upstream requests, p99 against a hit's",
    suite: true,
    needs: [],
    build: true,
    run: async (ctx) =>
      runFleetRefreshAheadScenario(await ctx.emulator(), {
        lone: { dashboards: 20, panels: 6 },
        shared: { teams: 24, screens: 5, panels: 1 },
        everyMs: 1_000,
        ttlMs: 4_000,
        seconds: ctx.options.number('fleet-poll-s', 70, 30),
      }),
  },
  {
    name: 'first-minute',
    budget: 'none configured: tm-cache at its DEFAULT settings (the learned budget, default freshness), what a new deployment gets',
    about:
      "a deployment's first minute at default settings against an instance 150 ms away with a limit tm-cache is not told: a cold dashboard, a team of ten, a CI burst of 200, a fleet started during a lockout, a rollout",
    suite: true,
    needs: ['redis-server'],
    build: true,
    run: async (ctx) =>
      runFirstMinuteScenario(await ctx.emulator(), {
        ciAgents: ctx.options.number('ci-agents', 200, 60),
        ciUsers: 20,
        pollers: ctx.options.short ? 40 : 60,
        lockoutS: 30,
        afterLockoutS: ctx.options.short ? 20 : 30,
        rolloutWindowS: ctx.options.short ? 15 : 30,
      }),
  },
  {
    name: 'security',
    budget: `${FIXED_BUDGET}; its passthrough floods (part e) set 10 req/s, burst 5: the budget the attack is measured against`,
    about:
      'memory under hostile traffic (token flood, one token 10,000 ways, 200 MB answers), fairness under a flood, and passthrough floods against a lockout (two replicas over Redis; about 2 min, no short mode)',
    suite: true,
    needs: ['redis-server'],
    build: true,
    run: async (ctx) => {
      const [em, page] = await withEmulator(ctx);
      return runSecurityScenario(em, { token: page.token, path: page.path });
    },
  },
];

const EXTRA: Scenario[] = [
  {
    name: 'ab:hit',
    budget: AB_BUDGET,
    about: 'this build against --base, serving at once in rotating rounds: memory hits (identity, gzip clients) and misses',
    suite: false,
    needs: ['wrk'],
    build: true,
    run: async (ctx) => {
      const o = ctx.options;
      const base = requireBase(o.string('base'));
      const [em, page] = await withEmulator(ctx);
      return runAbHit(em, page, { base, durationS: o.number('duration', 20, 4), rounds: o.number('rounds', 4, 2), misses: o.number('misses', 300, 60) });
    },
  },
  {
    name: 'trace',
    budget: FIXED_BUDGET,
    about: 'what tracing costs a memory hit: CPU per hit with OpenTelemetry on (every request; 1 % kept), exporting to a local OTLP receiver, against off',
    suite: false,
    needs: ['wrk'],
    build: true,
    run: async (ctx) => {
      const [em, page] = await withEmulator(ctx);
      return runTraceScenario(em, page, suiteLoad(ctx.options));
    },
  },
  {
    name: 'ab:redis',
    budget: AB_BUDGET,
    about: "Redis-tier hits of this build and --base's side by side, with this build's memory hit as the reference (--encrypted)",
    suite: false,
    needs: ['wrk', 'redis-server'],
    build: true,
    run: async (ctx) => {
      const o = ctx.options;
      const base = requireBase(o.string('base'));
      const [em, page] = await withEmulator(ctx);
      return runAbRedis(em, page, { base, durationS: o.number('duration', 12, 4), rounds: o.number('rounds', 3, 2), encrypted: o.flag('encrypted') });
    },
  },
  {
    name: 'ab:miss',
    budget: AB_BUDGET,
    about: 'misses against nginx proxy_pass, CPU by thread; optionally --base, --bare-proxy, --nginx-cache, --no-store, --node-flags, --configs',
    suite: false,
    needs: ['nginx'],
    build: true,
    run: async (ctx) => {
      const o = ctx.options;
      const given = o.string('base');
      const base = given === undefined ? undefined : requireBase(given);
      const [em, page] = await withEmulator(ctx);
      return runAbMiss(em, page, ctx.dir, {
        misses: o.number('misses', 600, 100),
        warmup: o.number('miss-warmup', 300, 50),
        base,
        bareProxy: o.flag('bare-proxy'),
        nginxCache: o.flag('nginx-cache'),
        noStore: o.flag('no-store'),
        nodeFlags: o.string('node-flags'),
        configs: o.string('configs'),
      });
    },
  },
  {
    name: 'ab:access-log',
    budget: FIXED_BUDGET,
    about:
      'what the access log costs a memory hit, with stdout a drained pipe, a regular file, /dev/null (log level info; per destination two servers at once, one on and one off, swapped each round; median of the rounds, beside a control pair both off)',
    suite: false,
    needs: ['wrk'],
    build: true,
    run: async (ctx) => {
      const [em, page] = await withEmulator(ctx);
      // Rounds go by twos, one each way (access-log-ab.ts).
      const rounds = 2 * Math.ceil(ctx.options.number('rounds', 12, 2) / 2);
      return runAbAccessLog(em, page, { sliceS: Math.max(1, Math.round(ctx.options.number('duration', 24, 3) / rounds)), rounds });
    },
  },
  {
    name: 'ab:decode',
    about: `a Redis-tier hit's decode (open + identity body), this ${DECODE_SOURCE} against --base's, in one process`,
    suite: false,
    needs: [],
    build: false,
    run: (ctx) => runAbDecode({ base: requireBase(ctx.options.string('base'), DECODE_SOURCE), rounds: ctx.options.number('rounds', 30, 8) }),
  },
  ...PROFILE_MODES.map((mode): Scenario => ({
    name: `profile:${mode}`,
    budget: mode === 'bare' || mode === 'floor' ? undefined : FIXED_BUDGET,
    about: `CPU profile of ${{ hit: 'memory hits', redis: 'Redis-tier hits', miss: 'distinct cold misses', bare: 'the bare fastify baseline', floor: 'the node:http floor' }[mode]}: top frames, by origin, GC share (--accept-encoding, --profile-out)`,
    suite: false,
    needs: mode === 'miss' ? [] : mode === 'redis' ? ['wrk', 'redis-server'] : ['wrk'],
    build: true,
    run: async (ctx) => {
      const o = ctx.options;
      return runProfile(mode, await ctx.emulator(), ctx.dir, {
        durationS: o.number('duration', 10, 3),
        top: o.number('top', 25),
        acceptEncoding: o.string('accept-encoding'),
        out: o.string('profile-out'),
      });
    },
  })),
  {
    name: 'revocation',
    budget: "the test replicas' fixed 100,000 req/s (test/helpers/proxy.ts), a rate it never reaches: it measures revocation, not the learned budget",
    about: "the README's revocation figures on the real clock: two replicas over a private redis-server (about 65 s, no short mode)",
    suite: false,
    needs: ['redis-server'],
    build: false,
    run: () => runRevocation(),
  },
  {
    name: 'codec',
    about: 'codecs for the Redis stored form: ratio, encode and decode time on a 100-item list page (--codec-modules)',
    suite: false,
    needs: [],
    build: false,
    run: (ctx) => Promise.resolve(runCodec({ rounds: ctx.options.number('rounds', 200, 20), modulesDir: ctx.options.string('codec-modules') })),
  },
  {
    name: 'emulator:micro',
    about: 'the emulator in this process: generation per scale, CPU per 100-run page through fastify and the handler alone',
    suite: false,
    needs: [],
    build: false,
    run: (ctx) => runEmulatorMicro(ctx.options.short ? 300 : 3_000),
  },
];

export const SCENARIOS: readonly Scenario[] = [...SUITE, ...EXTRA];
