/**
 * Scenario 1: a cache hit of the 100-run page with users expanded, 32 connections, each server
 * alone on the server core, in rotating rounds: Node's floor (a bare node:http server replaying
 * tm-cache's own answer), bare fastify, tm-cache with its access log off and on (to a file),
 * Varnish, nginx proxy_cache, and a second access-log-off tm-cache as a control (two identical
 * processes); then the floor and the tm-caches again for gzip clients. The
 * verdict is CPU per hit: the floor's ÷ tm-cache's (≥ 0.9), and the access log off ÷ on (≤ 1).
 */
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { compareHits, fetchPage, type HitFigures, type LoadOptions, type Page } from './measure.js';
import { startNginx, startVarnish, type Peer } from './peers.js';
import { freePort } from './procs.js';
import { fmt, maxCheck, median, noiseNote, noisyRows, printTable, ratioCheck, type Check } from './report.js';
import { BENCH_BUDGET, rawAnswer, SERVER_CPU, startBare, startFloor, startTmCache, type Emulator, type Server } from './servers.js';

export const RUNS_ROUTE = 'GET /api/v1/projects/{project_id}/runs';

export interface HitRow extends Partial<HitFigures> {
  readonly name: string;
  /** Page requests that reached the emulator for two requests in a row to this server alone (a cache: 1). */
  readonly upstreamForTwo?: number;
  readonly skipped?: string;
}

export interface HitScenario {
  readonly rows: HitRow[];
  /** The floor and tm-cache (access log off, on) for clients that accept gzip. */
  readonly gzipRows: HitFigures[];
  /** Page requests that reached the emulator during the whole measurement, all caches together. */
  readonly upstreamDuringRun: number;
  readonly requestsDuringRun: number;
  readonly checks: Check[];
}

type Starter = () => Promise<Server | Peer | string>;

/** Two requests in a row, alone: how many reached the emulator (a cache that caches: 1). */
async function upstreamForTwo(emulator: Emulator, server: Server, page: Page): Promise<number> {
  await emulator.resetStats();
  await fetchPage(server.url + page.path, page.token);
  await fetchPage(server.url + page.path, page.token);
  return (await emulator.stats()).by_route[RUNS_ROUTE] ?? 0;
}

/** The access log's stdout for the "on" server: a regular file (stdout-to.mjs), as `docker run > file` or systemd's StandardOutput=file:. */
const STDOUT_TO = fileURLToPath(new URL('./stdout-to.mjs', import.meta.url));
const FLOOR = 'node:http floor';
const TM_OFF = 'tm-cache, access log off';
const TM_ON = 'tm-cache, access log on';
/** A second process of the same build and settings as TM_OFF: how far two identical processes differ in this run. */
const TM_CONTROL = 'tm-cache, access log off (control)';

/** tm-cache with its access log on (log level info, every line), stdout a regular file under `dir`. */
function startTmCacheLogging(dir: string, emulatorUrl: string): Promise<Server> {
  return startTmCache(emulatorUrl, {
    name: TM_ON,
    logLevel: 'info',
    nodeArgs: [STDOUT_TO, join(dir, 'access.log')],
    config: { ...BENCH_BUDGET, log: { access: 'all', accessSample: 1 } },
  });
}

export async function runHitScenario(dir: string, emulator: Emulator, page: Page, load: LoadOptions): Promise<HitScenario> {
  const backend = { host: '127.0.0.1', port: Number(new URL(emulator.url).port) };
  const starters: [string, Starter][] = [
    // Replays tm-cache's own answers: started last (below), once a tm-cache has answered.
    [FLOOR, () => Promise.resolve('not started')],
    ['bare fastify', () => startBare(dir, page.body, page.contentType)],
    [TM_OFF, () => startTmCache(emulator.url, { name: TM_OFF, logLevel: 'warn' })],
    [TM_ON, () => startTmCacheLogging(dir, emulator.url)],
    [TM_CONTROL, () => startTmCache(emulator.url, { name: TM_CONTROL, logLevel: 'warn' })],
    ['varnish', async () => startVarnish(dir, await freePort(), backend, SERVER_CPU)],
    ['nginx proxy_cache', async () => startNginx(dir, await freePort(), backend, SERVER_CPU)],
  ];
  const servers: Server[] = [];
  const skipped = new Map<string, string>();
  const fills = new Map<string, number>();
  try {
    for (const [name, start] of starters.slice(1)) {
      const server = await start();
      if (typeof server === 'string') {
        console.log(`   ${name}: skipped: ${server}`);
        skipped.set(name, server);
        continue;
      }
      servers.push({ ...server, name });
      if (name !== 'bare fastify') fills.set(name, await upstreamForTwo(emulator, server, page));
    }
    // The floor replays tm-cache's own answers. Both tm-caches are asked alike, so that each has
    // served the same requests before the load (what V8 optimised for, with which header shapes).
    const auth = { authorization: `Bearer ${page.token}` };
    const gzipAuth = { ...auth, 'accept-encoding': 'gzip' };
    const answers = [];
    for (const tm of servers.filter((s) => s.name === TM_OFF || s.name === TM_ON || s.name === TM_CONTROL)) {
      answers.push({ identity: await rawAnswer(tm.url + page.path, auth), gzip: await rawAnswer(tm.url + page.path, gzipAuth) });
    }
    const floor = await startFloor(dir, answers[0]!);
    servers.unshift(floor);
    await emulator.resetStats();
    const t0 = performance.now();
    const figures = await compareHits(servers, page, load);
    // Clients that accept gzip (browsers, SDKs): the floor replays tm-cache's gzip answer.
    const gzipServers = servers.filter((s) => s.name === FLOOR || s.name === TM_OFF || s.name === TM_ON || s.name === TM_CONTROL);
    const gzipFigures = await compareHits(gzipServers, page, { ...load, headers: { 'accept-encoding': 'gzip' } });
    const upstreamDuringRun = (await emulator.stats()).by_route[RUNS_ROUTE] ?? 0;
    const elapsedS = (performance.now() - t0) / 1_000;
    const rows: HitRow[] = starters.map(([name]) => {
      const f = figures.find((x) => x.name === name);
      return f ? { ...f, upstreamForTwo: fills.get(name) } : { name, skipped: skipped.get(name) ?? 'not measured' };
    });
    const requests = sum(figures.map((f) => f.requests)) + sum(gzipFigures.map((f) => f.requests));
    return report(rows, gzipFigures, page, load, { upstreamDuringRun, requestsDuringRun: requests, elapsedS });
  } finally {
    await Promise.all(servers.map((s) => s.proc.stop()));
  }
}

const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);

/** `a`'s CPU per hit ÷ `b`'s, per round (the rounds are paired: each server took one slice per round): median, least, most. */
function perRound(a: HitFigures | undefined, b: HitFigures | undefined): { median: number; min: number; max: number } | undefined {
  if (a === undefined || b === undefined) return undefined;
  const ratios = a.roundCpuUsPerReq.map((x, k) => x / b.roundCpuUsPerReq[k]!);
  return { median: median(ratios), min: Math.min(...ratios), max: Math.max(...ratios) };
}

const cpuRatio = (a: HitFigures | undefined, b: HitFigures | undefined): number | undefined =>
  a?.cpuUsPerReq !== undefined && b?.cpuUsPerReq ? a.cpuUsPerReq / b.cpuUsPerReq : undefined;

const spread = (r: ReturnType<typeof perRound>): string => (r === undefined ? '—' : `${fmt(r.median)} (${fmt(r.min)}–${fmt(r.max)})`);

function report(
  rows: HitRow[],
  gzip: HitFigures[],
  page: Page,
  load: LoadOptions,
  run: { upstreamDuringRun: number; requestsDuringRun: number; elapsedS: number },
): HitScenario {
  const { upstreamDuringRun, requestsDuringRun, elapsedS } = run;
  const measured = (name: string): HitFigures | undefined => {
    const r = rows.find((x) => x.name === name);
    return r?.cpuUsPerReq === undefined ? undefined : (r as HitFigures);
  };
  const [floor, off, on, control] = [measured(FLOOR), measured(TM_OFF), measured(TM_ON), measured(TM_CONTROL)];
  const gz = (name: string) => gzip.find((f) => f.name === name);
  const [gzFloor, gzOff, gzOn, gzControl] = [gz(FLOOR), gz(TM_OFF), gz(TM_ON), gz(TM_CONTROL)];
  printTable(
    `1. Cache hit: ${page.path} (${page.body.length} B), identity clients, ${load.connections} connections, ${load.durationS} s each in ${load.rounds} rotating rounds, server on core ${SERVER_CPU}`,
    [
      'server',
      'req/s',
      'rounds req/s',
      'p50 ms',
      'p99 ms',
      'server CPU %',
      'wrk core %',
      'CPU µs/req',
      'rounds CPU µs/req',
      '1-core req/s',
      'errors',
      'upstream/2',
      'same bytes',
      'floor ÷ this (CPU)',
      'per round: median (min–max)',
    ],
    rows.map((r) =>
      r.skipped
        ? [r.name, 'skipped']
        : [
            r.name,
            fmt(r.rps, 0),
            (r.roundRps ?? []).map((x) => (x / 1000).toFixed(1) + 'k').join(' '),
            fmt(r.p50Ms),
            fmt(r.p99Ms),
            fmt(r.cpuPct, 0),
            fmt(r.loadCorePct, 0),
            fmt(r.cpuUsPerReq, 1),
            (r.roundCpuUsPerReq ?? []).map((x) => x.toFixed(1)).join(' '),
            fmt(r.capacityRps, 0),
            r.errors,
            r.name === 'bare fastify' || r.name === FLOOR ? 'n/a' : r.upstreamForTwo,
            r.sameBytes ? 'yes' : 'NO',
            fmt(cpuRatio(floor, measured(r.name))),
            spread(perRound(floor, measured(r.name))),
          ],
    ),
    [
      `"${FLOOR}": a bare node:http server answering every request with tm-cache's own status, headers and body (floor-server.ts),`,
      "  from one fixed Buffer: what a hit costs in Node itself. What tm-cache costs above it is tm-cache's; what it costs above Varnish, Node's.",
      `"${TM_ON}": log level info, a line per request, stdout a regular file; "${TM_OFF}": log level warn.`,
      '"floor ÷ this (CPU)": the floor\'s CPU per hit ÷ this server\'s, all rounds together (1: as cheap as the floor);',
      '  "per round": the same ratio in each round (every server took one slice per round): its median is the verdict (target for',
      '  tm-cache ≥ 0.9), its spread the noise of this run.',
      '"upstream/2": page requests that reached the emulator for two requests in a row to that server alone (caching: 1).',
      `During the measurement (${fmt(elapsedS, 0)} s, ${requestsDuringRun.toLocaleString('en-US')} requests) ${upstreamDuringRun} page requests reached the emulator, all caches together (30 s TTLs).`,
      '"server CPU %": the server process group, % of one core. Well under 100 while "wrk core %" is ~100: wrk (one core,',
      '  reading ~87 KB per answer) was the limit, so req/s ratios are compressed toward 1: CPU per request is the figure compared;',
      '  "1-core req/s" = 1e6 ÷ CPU µs/req is what the pinned core could serve at that cost.',
      ...rows.filter((r) => r.skipped).map((r) => `${r.name}: ${r.skipped}`),
      ...noiseNote(noisyRows(rows)),
    ],
  );
  printTable(
    `1b. The same hit for clients that send Accept-Encoding: gzip (the floor replays tm-cache's gzip answer)`,
    ['server', 'req/s', 'p50 ms', 'p99 ms', 'CPU µs/req', 'rounds CPU µs/req', 'errors', 'floor ÷ this (CPU)', 'per round: median (min–max)'],
    gzip.map((f) => [
      f.name,
      fmt(f.rps, 0),
      fmt(f.p50Ms),
      fmt(f.p99Ms),
      fmt(f.cpuUsPerReq, 1),
      f.roundCpuUsPerReq.map((x) => x.toFixed(1)).join(' '),
      f.errors,
      fmt(cpuRatio(gzFloor, f)),
      spread(perRound(gzFloor, f)),
    ]),
    noiseNote(noisyRows(gzip)),
  );
  printTable(
    '1c. The access log, off against on (CPU per hit; off must never cost more than on)',
    ['clients', 'off µs/req', 'on µs/req', 'off ÷ on', 'per round: median (min–max)'],
    [
      ['identity', fmt(off?.cpuUsPerReq, 1), fmt(on?.cpuUsPerReq, 1), fmt(cpuRatio(off, on)), spread(perRound(off, on))],
      ['gzip', fmt(gzOff?.cpuUsPerReq, 1), fmt(gzOn?.cpuUsPerReq, 1), fmt(cpuRatio(gzOff, gzOn)), spread(perRound(gzOff, gzOn))],
      ['identity, control: off ÷ off', fmt(off?.cpuUsPerReq, 1), fmt(control?.cpuUsPerReq, 1), fmt(cpuRatio(off, control)), spread(perRound(off, control))],
      [
        'gzip, control: off ÷ off',
        fmt(gzOff?.cpuUsPerReq, 1),
        fmt(gzControl?.cpuUsPerReq, 1),
        fmt(cpuRatio(gzOff, gzControl)),
        spread(perRound(gzOff, gzControl)),
      ],
    ],
    [
      `"control": "${TM_OFF}" against "${TM_CONTROL}", a second process of the same build and settings, asked alike:`,
      "  how far two identical processes differ in this run. A difference between off and on within it is not the access log's.",
    ],
  );
  const notCaching = rows.filter((r) => r.name !== 'bare fastify' && r.name !== FLOOR && !r.skipped && r.upstreamForTwo !== 1);
  for (const r of notCaching) console.log(`   WARNING: ${r.name} sent ${r.upstreamForTwo} page requests upstream for 2 requests: it is not really caching`);
  if (upstreamDuringRun > requestsDuringRun / 1_000)
    console.log(`   WARNING: ${upstreamDuringRun} page requests reached the emulator during the run: something is not caching`);
  const byCapacity = (other: string) => {
    const them = measured(other);
    return off && them ? off.capacityRps / them.capacityRps : undefined;
  };
  return {
    rows,
    gzipRows: gzip,
    upstreamDuringRun,
    requestsDuringRun,
    checks: [
      ratioCheck('hit, identity: node:http floor ÷ tm-cache, access log off (CPU per hit, median of rounds)', perRound(floor, off)?.median, 0.9),
      ratioCheck('hit, identity: node:http floor ÷ tm-cache, access log on (CPU per hit, median of rounds)', perRound(floor, on)?.median, 0.9),
      ratioCheck('hit, gzip: node:http floor ÷ tm-cache, access log off (CPU per hit, median of rounds)', perRound(gzFloor, gzOff)?.median, 0.9),
      ratioCheck('hit, gzip: node:http floor ÷ tm-cache, access log on (CPU per hit, median of rounds)', perRound(gzFloor, gzOn)?.median, 0.9),
      maxCheck('hit, identity: access log off ÷ on (CPU per hit, median of rounds)', perRound(off, on)?.median, 1),
      maxCheck('hit, gzip: access log off ÷ on (CPU per hit, median of rounds)', perRound(gzOff, gzOn)?.median, 1),
      ratioCheck('hit, identity: control, one off process ÷ another (CPU per hit, median of rounds)', perRound(off, control)?.median, undefined),
      ratioCheck('hit: tm-cache ÷ bare fastify (1-core, CPU/req)', byCapacity('bare fastify'), 0.85),
      ratioCheck('hit: tm-cache ÷ varnish (1-core, CPU/req)', byCapacity('varnish'), 1.0),
      ratioCheck('hit: tm-cache ÷ nginx proxy_cache (1-core)', byCapacity('nginx proxy_cache'), undefined),
      ratioCheck("hit: Node's floor ÷ varnish (1-core, CPU/req)", cpuRatio(measured('varnish'), floor), undefined),
      ratioCheck("hit: Node's floor ÷ nginx proxy_cache (1-core, CPU/req)", cpuRatio(measured('nginx proxy_cache'), floor), undefined),
    ],
  };
}
