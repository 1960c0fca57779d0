/**
 * Scenario 1: a cache hit of the 100-run page with users expanded, 32 connections, each server
 * alone on the server core: bare fastify (baseline), tm-cache, Varnish, nginx proxy_cache.
 */
import { compareHits, fetchPage, type HitFigures, type LoadOptions, type Page } from './measure.js';
import { startNginx, startVarnish, type Peer } from './peers.js';
import { freePort } from './procs.js';
import { fmt, noiseNote, noisyRows, printTable, ratioCheck, type Check } from './report.js';
import { SERVER_CPU, startBare, startTmCache, type Emulator, type Server } from './servers.js';

export const RUNS_ROUTE = 'GET /api/v1/projects/{project_id}/runs';

export interface HitRow extends Partial<HitFigures> {
  readonly name: string;
  /** Page requests that reached the emulator for two requests in a row to this server alone (a cache: 1). */
  readonly upstreamForTwo?: number;
  readonly skipped?: string;
}

export interface HitScenario {
  readonly rows: HitRow[];
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

export async function runHitScenario(dir: string, emulator: Emulator, page: Page, load: LoadOptions): Promise<HitScenario> {
  const backend = { host: '127.0.0.1', port: Number(new URL(emulator.url).port) };
  const starters: [string, Starter][] = [
    ['bare fastify', () => startBare(dir, page.body, page.contentType)],
    ['tm-cache', () => startTmCache(emulator.url)],
    ['varnish', async () => startVarnish(dir, await freePort(), backend, SERVER_CPU)],
    ['nginx proxy_cache', async () => startNginx(dir, await freePort(), backend, SERVER_CPU)],
  ];
  const servers: Server[] = [];
  const skipped = new Map<string, string>();
  const fills = new Map<string, number>();
  try {
    for (const [name, start] of starters) {
      const server = await start();
      if (typeof server === 'string') {
        console.log(`   ${name}: skipped: ${server}`);
        skipped.set(name, server);
        continue;
      }
      servers.push({ ...server, name });
      if (name !== 'bare fastify') fills.set(name, await upstreamForTwo(emulator, server, page));
    }
    await emulator.resetStats();
    const t0 = performance.now();
    const figures = await compareHits(servers, page, load);
    const upstreamDuringRun = (await emulator.stats()).by_route[RUNS_ROUTE] ?? 0;
    const elapsedS = (performance.now() - t0) / 1_000;
    const rows: HitRow[] = starters.map(([name]) => {
      const f = figures.find((x) => x.name === name);
      return f ? { ...f, upstreamForTwo: fills.get(name) } : { name, skipped: skipped.get(name) ?? 'not measured' };
    });
    return report(rows, page, load, upstreamDuringRun, sum(figures.map((f) => f.requests)), elapsedS);
  } finally {
    await Promise.all(servers.map((s) => s.proc.stop()));
  }
}

const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);

function report(rows: HitRow[], page: Page, load: LoadOptions, upstreamDuringRun: number, requestsDuringRun: number, elapsedS: number): HitScenario {
  const figure = (name: string, of: 'rps' | 'capacityRps') => rows.find((r) => r.name === name)?.[of];
  const ratio = (other: string, of: 'rps' | 'capacityRps' = 'rps') => {
    const [tm, them] = [figure('tm-cache', of), figure(other, of)];
    return tm !== undefined && them ? tm / them : undefined;
  };
  printTable(
    `1. Cache hit: ${page.path} (${page.body.length} B), ${load.connections} connections, ${load.durationS} s each in ${load.rounds} rotating rounds, server on core ${SERVER_CPU}`,
    [
      'server',
      'req/s',
      'rounds req/s',
      'p50 ms',
      'p99 ms',
      'server CPU %',
      'wrk core %',
      'CPU µs/req',
      '1-core req/s',
      'errors',
      'upstream/2',
      'same bytes',
      'tm ÷ this req/s',
      'tm ÷ this 1-core',
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
            fmt(r.capacityRps, 0),
            r.errors,
            r.name === 'bare fastify' ? 'n/a' : r.upstreamForTwo,
            r.sameBytes ? 'yes' : 'NO',
            fmt(ratio(r.name)),
            fmt(ratio(r.name, 'capacityRps')),
          ],
    ),
    [
      '"upstream/2": page requests that reached the emulator for two requests in a row to that server alone (caching: 1).',
      `During the measurement (${fmt(elapsedS, 0)} s, ${requestsDuringRun.toLocaleString('en-US')} requests) ${upstreamDuringRun} page requests reached the emulator, all caches together (30 s TTLs).`,
      '"server CPU %": the server process group, % of one core. Well under 100 while "wrk core %" is ~100: wrk (one core,',
      '  reading ~87 KB per answer) was the limit, so req/s ratios are compressed toward 1; "1-core req/s" = 1e6 ÷ CPU µs/req',
      "  is what the pinned core could serve at the measured cost, and its ratio compares the servers' own work.",
      ...rows.filter((r) => r.skipped).map((r) => `${r.name}: ${r.skipped}`),
      ...noiseNote(noisyRows(rows)),
    ],
  );
  const notCaching = rows.filter((r) => r.name !== 'bare fastify' && !r.skipped && r.upstreamForTwo !== 1);
  for (const r of notCaching) console.log(`   WARNING: ${r.name} sent ${r.upstreamForTwo} page requests upstream for 2 requests: it is not really caching`);
  if (upstreamDuringRun > requestsDuringRun / 1_000)
    console.log(`   WARNING: ${upstreamDuringRun} page requests reached the emulator during the run: something is not caching`);
  return {
    rows,
    upstreamDuringRun,
    requestsDuringRun,
    checks: [
      ratioCheck('hit: tm-cache ÷ bare fastify (req/s)', ratio('bare fastify'), 0.85),
      ratioCheck('hit: tm-cache ÷ bare fastify (1-core, CPU/req)', ratio('bare fastify', 'capacityRps'), 0.85),
      ratioCheck('hit: tm-cache ÷ varnish (req/s)', ratio('varnish'), 1.0),
      ratioCheck('hit: tm-cache ÷ varnish (1-core, CPU/req)', ratio('varnish', 'capacityRps'), 1.0),
      ratioCheck('hit: tm-cache ÷ nginx proxy_cache (req/s)', ratio('nginx proxy_cache'), undefined),
      ratioCheck('hit: tm-cache ÷ nginx proxy_cache (1-core)', ratio('nginx proxy_cache', 'capacityRps'), undefined),
    ],
  };
}
