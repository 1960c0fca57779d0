/**
 * Scenario "capacity": what one core sustains for a realistic mix, tm-cache against Varnish and
 * nginx proxy_cache configured alike. wrk (32 connections, a Lua script) picks each request:
 *
 *   90% fresh hits     runs lists of the member callers' projects, fresh for an hour everywhere;
 *    9% stale hits     milestone lists (thousands of distinct ones, `created_before` spelled per
 *                      list), fresh for 1 s then served stale for an hour while ONE background
 *                      refresh runs: tm-cache stale-while-revalidate, Varnish grace, nginx
 *                      `proxy_cache_use_stale updating` + `proxy_cache_background_update`; picked
 *                      at random among so many that each is asked less than once a second, so
 *                      nearly every such request finds its entry stale and triggers a refresh;
 *    1% misses         runs lists with a `created_before` no one asked before (a counter).
 *
 * All three are filled with the hit and stale sets first, then measured in turn (rotating rounds)
 * on the server core; the emulator's stats give the mix each one really served (upstream page
 * requests per route). "1-core req/s" = requests ÷ the server's CPU seconds: the capacity of
 * the pinned core even when the emulator or wrk, sharing the load core, was the limit of req/s.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Pool } from 'undici';
import { makeVcl, nginxConf, proxyLocation, startNginx, startVarnish, type Backend } from './peers.js';
import { freePort, groupCpuSeconds } from './procs.js';
import { timedGet } from './questions.js';
import { fmt, printTable, ratioCheck, type Check } from './report.js';
import { SERVER_CPU, startTmCache, writeConfig, type Emulator, type Server, type TokenInfo } from './servers.js';
import { runWrk, type WrkResult } from './wrk.js';

export interface MixRequest {
  readonly path: string;
  readonly token: string;
}

export interface MixSets {
  readonly hits: readonly MixRequest[];
  readonly stale: readonly MixRequest[];
  /** Lists whose `created_before` the script makes unique per request (each path carries a query). */
  readonly missBases: readonly MixRequest[];
}

export interface MixShares {
  readonly hit: number;
  readonly stale: number;
  readonly miss: number;
}

export const REALISTIC_MIX: MixShares = { hit: 0.9, stale: 0.09, miss: 0.01 };

const STALE_TTL_S = 1;
const LONG_TTL_S = 3_600;
const RUNS_ROUTE = 'GET /api/v1/projects/{project_id}/runs';
const MILESTONES_ROUTE = 'GET /api/v1/projects/{project_id}/milestones';

const lua = (s: string): string => JSON.stringify(s); // a JSON string of ASCII is a valid Lua string

/**
 * The wrk Lua script of a mix: a request picks a set by `shares`, then an entry of the set at
 * random; a miss gets `&created_before=<missDay>T<counter as hh:mm:ss.mmm>Z`, unique per request
 * and per day, so two servers given two days never share a miss.
 */
export function makeMixScript(sets: MixSets, shares: MixShares, missDay: string, seed = 42): string {
  const total = shares.hit + shares.stale + shares.miss;
  if (!(total > 0) || sets.hits.length === 0 || sets.stale.length === 0 || sets.missBases.length === 0)
    throw new Error('a mix needs positive shares and a request in every set');
  if (!/^\d{4}-\d{2}-\d{2}$/.test(missDay)) throw new Error(`missDay must be YYYY-MM-DD, got ${missDay}`);
  const table = (xs: readonly MixRequest[]) => `{\n${xs.map((x) => `  {${lua(x.path)}, ${lua(`Bearer ${x.token}`)}},`).join('\n')}\n}`;
  return `local hits = ${table(sets.hits)}
local stale = ${table(sets.stale)}
local misses = ${table(sets.missBases)}
local hitBelow = ${shares.hit / total}
local staleBelow = ${(shares.hit + shares.stale) / total}
local n = 0
math.randomseed(${seed})
local function get(path, auth)
  return wrk.format("GET", path, { ["Authorization"] = auth })
end
request = function()
  local r = math.random()
  if r < hitBelow then
    local e = hits[math.random(#hits)]
    return get(e[1], e[2])
  elseif r < staleBelow then
    local e = stale[math.random(#stale)]
    return get(e[1], e[2])
  end
  n = n + 1
  local e = misses[(n % #misses) + 1]
  local ms = n % 1000
  local s = math.floor(n / 1000) % 60
  local m = math.floor(n / 60000) % 60
  local h = math.floor(n / 3600000) % 24
  return get(e[1] .. string.format("&created_before=${missDay}T%02d:%02d:%02d.%03dZ", h, m, s, ms), e[2])
end
`;
}

/** The hit, stale and miss sets over the member callers' projects (tokens of users 2–4). */
export function makeMixSets(tokens: readonly TokenInfo[], staleCount: number): MixSets {
  const members = tokens.filter((t) => !t.is_admin && t.project_ids.length > 0).slice(0, 3);
  if (members.length === 0) throw new Error('no member token with a project');
  const hits: MixRequest[] = [];
  const missBases: MixRequest[] = [];
  const projectsOf = members.map((t) => ({ token: t.token, projects: t.project_ids.slice(0, 4) }));
  for (const { token, projects } of projectsOf) {
    for (const p of projects) {
      for (const q of ['per_page=25&expands=users', 'per_page=25&expands=users&page=2', 'per_page=15&is_closed=0', 'per_page=50']) {
        hits.push({ path: `/api/v1/projects/${p}/runs?${q}`, token });
      }
      missBases.push({ path: `/api/v1/projects/${p}/runs?per_page=25&expands=users`, token });
    }
  }
  const stale: MixRequest[] = [];
  const base = Date.UTC(2031, 0, 1);
  for (let i = 0; stale.length < staleCount; i++) {
    const { token, projects } = projectsOf[i % projectsOf.length]!;
    const p = projects[Math.floor(i / projectsOf.length) % projects.length]!;
    stale.push({ path: `/api/v1/projects/${p}/milestones?per_page=15&created_before=${new Date(base + i).toISOString()}`, token });
  }
  return { hits, stale, missBases };
}

function capacityVcl(backend: Backend): string {
  return makeVcl(
    backend,
    `  if (bereq.url ~ "/milestones") {
    set beresp.ttl = ${STALE_TTL_S}s;
  } else {
    set beresp.ttl = ${LONG_TTL_S}s;
  }
  set beresp.grace = ${LONG_TTL_S}s;`,
  );
}

function capacityNginxConf(dir: string, port: number, backend: Backend): string {
  const cache = (validS: number) => `      proxy_cache bench;
      proxy_cache_key "$http_authorization$request_uri";
      proxy_cache_valid 200 ${validS}s;
      proxy_ignore_headers Cache-Control Expires Set-Cookie;
      proxy_cache_lock on;
      proxy_cache_use_stale updating;
      proxy_cache_background_update on;`;
  return nginxConf(
    dir,
    port,
    backend,
    `  proxy_cache_path ${join(dir, 'cache')} levels=1:2 keys_zone=bench:32m max_size=512m inactive=2h use_temp_path=off;`,
    `${proxyLocation('~ /milestones', cache(STALE_TTL_S))}\n${proxyLocation('/', cache(LONG_TTL_S))}`,
  );
}

/** Every request of `requests`, 16 at a time; throws on the first non-200. */
async function fill(server: Server, requests: readonly MixRequest[]): Promise<void> {
  const pool = new Pool(server.url, { connections: 16 });
  let next = 0;
  try {
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        while (next < requests.length) {
          const r = requests[next++]!;
          const got = await timedGet(pool, r.path, { authorization: `Bearer ${r.token}` });
          if (got.status !== 200) throw new Error(`${server.name}: ${r.path} → ${got.status}: ${got.body.subarray(0, 200).toString()}`);
        }
      }),
    );
  } finally {
    await pool.close();
  }
}

export interface CapacityRow {
  readonly name: string;
  readonly requests: number;
  readonly rps: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly cpuUsPerReq: number;
  readonly capacityRps: number;
  readonly errors: number;
  /** Shares of requests that went upstream as misses (runs lists) and stale refreshes (milestone lists). */
  readonly missShare: number;
  readonly staleRefreshShare: number;
  readonly otherUpstream: number;
  readonly skipped?: string;
}

export interface CapacityScenario {
  readonly rows: CapacityRow[];
  readonly sets: { readonly hits: number; readonly stale: number; readonly missBases: number };
  readonly checks: Check[];
}

interface Slice {
  readonly wrk: WrkResult;
  readonly cpuS: number;
  readonly misses: number;
  readonly refreshes: number;
  readonly other: number;
}

export async function runCapacityScenario(
  dir: string,
  emulator: Emulator,
  options: { durationS: number; rounds: number; staleCount: number },
): Promise<CapacityScenario> {
  const backend = { host: '127.0.0.1', port: Number(new URL(emulator.url).port) };
  const sets = makeMixSets(emulator.tokens, options.staleCount);
  const config = writeConfig(dir, 'capacity', {
    cache: {
      freshness: {
        default: { ttlMs: LONG_TTL_S * 1_000, staleWhileRevalidateMs: LONG_TTL_S * 1_000 },
        byResource: { milestone: { ttlMs: STALE_TTL_S * 1_000, staleWhileRevalidateMs: LONG_TTL_S * 1_000 } },
      },
    },
  });
  const servers: Server[] = [];
  const skipped = new Map<string, string>();
  const starters: [string, () => Promise<Server | string>][] = [
    ['tm-cache', () => startTmCache(emulator.url, { name: 'tm-cache', env: { TM_CACHE_CONFIG: config } })],
    [
      'varnish',
      async () =>
        startVarnish(
          mkdirSync(join(dir, 'capacity-varnish'), { recursive: true }) ?? join(dir, 'capacity-varnish'),
          await freePort(),
          backend,
          SERVER_CPU,
          capacityVcl(backend),
        ),
    ],
    ['nginx proxy_cache', async () => startNginx(dir, await freePort(), backend, SERVER_CPU, capacityNginxConf, 'nginx capacity')],
  ];
  const slices = new Map<string, Slice[]>();
  const sliceS = Math.max(1, Math.round(options.durationS / options.rounds));
  try {
    for (const [name, start] of starters) {
      const server = await start();
      if (typeof server === 'string') {
        skipped.set(name, server);
        continue;
      }
      servers.push({ ...server, name });
      await fill(servers.at(-1)!, [...sets.hits, ...sets.stale]);
    }
    await sleep(STALE_TTL_S * 1_000 + 200); // the stale set is now stale everywhere
    for (let round = 0; round < options.rounds; round++) {
      for (let i = 0; i < servers.length; i++) {
        const index = (i + round) % servers.length;
        const server = servers[index]!;
        // A wrk run starts its counter at 0: each (server, round) gets its own day, so no miss is asked twice.
        const script = join(dir, `mix-${index}-${round}.lua`);
        writeFileSync(
          script,
          makeMixScript(sets, REALISTIC_MIX, `2033-${String(round + 1).padStart(2, '0')}-${String(index + 1).padStart(2, '0')}`, 42 + round),
        );
        await emulator.resetStats();
        const cpuBefore = groupCpuSeconds(server.proc.pid);
        const wrk = await runWrk({ url: server.url, connections: 32, durationS: sliceS, script });
        const cpuS = groupCpuSeconds(server.proc.pid) - cpuBefore;
        const stats = await emulator.stats();
        const misses = stats.by_route[RUNS_ROUTE] ?? 0;
        const refreshes = stats.by_route[MILESTONES_ROUTE] ?? 0;
        slices.set(server.name, [...(slices.get(server.name) ?? []), { wrk, cpuS, misses, refreshes, other: stats.total - misses - refreshes }]);
      }
    }
  } finally {
    await Promise.all(servers.map((s) => s.proc.stop()));
  }
  const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
  const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? NaN;
  const rows: CapacityRow[] = starters.map(([name]) => {
    const ss = slices.get(name);
    if (!ss)
      return {
        name,
        requests: 0,
        rps: NaN,
        p50Ms: NaN,
        p99Ms: NaN,
        cpuUsPerReq: NaN,
        capacityRps: NaN,
        errors: 0,
        missShare: NaN,
        staleRefreshShare: NaN,
        otherUpstream: 0,
        skipped: skipped.get(name) ?? 'not measured',
      };
    const requests = sum(ss.map((s) => s.wrk.requests));
    const cpuS = sum(ss.map((s) => s.cpuS));
    return {
      name,
      requests,
      rps: requests / sum(ss.map((s) => s.wrk.durationS)),
      p50Ms: med(ss.map((s) => s.wrk.latencyMs.p50)),
      p99Ms: med(ss.map((s) => s.wrk.latencyMs.p99)),
      cpuUsPerReq: (cpuS * 1e6) / requests,
      capacityRps: requests / cpuS,
      errors: sum(ss.map((s) => s.wrk.socketErrors + s.wrk.non2xx)),
      missShare: sum(ss.map((s) => s.misses)) / requests,
      staleRefreshShare: sum(ss.map((s) => s.refreshes)) / requests,
      otherUpstream: sum(ss.map((s) => s.other)),
    };
  });
  const tm = rows[0]!;
  const ratio = (name: string, of: 'rps' | 'capacityRps') => {
    const them = rows.find((r) => r.name === name);
    return them && !them.skipped && them[of] > 0 ? tm[of] / them[of] : undefined;
  };
  printTable(
    `8. Capacity: one core, mix ${REALISTIC_MIX.hit * 100}% fresh hits / ${REALISTIC_MIX.stale * 100}% stale hits (refresh) / ${REALISTIC_MIX.miss * 100}% misses, wrk 32 connections, ${options.rounds} rotating rounds of ${sliceS} s each, server on core ${SERVER_CPU}`,
    [
      'server',
      'req/s',
      'p50 ms',
      'p99 ms',
      'CPU µs/req',
      '1-core req/s',
      'errors',
      'upstream: misses',
      'stale refreshes',
      'other',
      'tm ÷ this req/s',
      'tm ÷ this 1-core',
    ],
    rows.map((r) =>
      r.skipped
        ? [r.name, `skipped: ${r.skipped}`]
        : [
            r.name,
            fmt(r.rps, 0),
            fmt(r.p50Ms),
            fmt(r.p99Ms),
            fmt(r.cpuUsPerReq, 1),
            fmt(r.capacityRps, 0),
            r.errors,
            `${fmt(100 * r.missShare, 2)}%`,
            `${fmt(100 * r.staleRefreshShare, 2)}%`,
            r.otherUpstream,
            fmt(ratio(r.name, 'rps')),
            fmt(ratio(r.name, 'capacityRps')),
          ],
    ),
    [
      `Sets: ${sets.hits.length} hit lists (fresh ${LONG_TTL_S} s), ${sets.stale.length} stale lists (fresh ${STALE_TTL_S} s, then stale-while-revalidate), misses from ${sets.missBases.length} lists with a new created_before each.`,
      '"upstream: misses / stale refreshes": page requests that reached the emulator as a share of requests served: the mix each server really saw.',
      '"other": upstream requests of other routes (tm-cache: identity look-ups, project access confirmations).',
      '"1-core req/s" = requests ÷ server CPU seconds; req/s is also bounded by the emulator and wrk sharing the load core.',
    ],
  );
  return {
    rows,
    sets: { hits: sets.hits.length, stale: sets.stale.length, missBases: sets.missBases.length },
    checks: [
      ratioCheck('capacity: tm-cache 1-core req/s (90/9/1 mix)', tm.capacityRps, undefined),
      ratioCheck('capacity: tm-cache ÷ varnish (req/s)', ratio('varnish', 'rps'), undefined),
      ratioCheck('capacity: tm-cache ÷ varnish (1-core)', ratio('varnish', 'capacityRps'), undefined),
      ratioCheck('capacity: tm-cache ÷ nginx proxy_cache (req/s)', ratio('nginx proxy_cache', 'rps'), undefined),
      ratioCheck('capacity: tm-cache ÷ nginx proxy_cache (1-core)', ratio('nginx proxy_cache', 'capacityRps'), undefined),
    ],
  };
}
