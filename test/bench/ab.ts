/**
 * Two builds side by side, in one run: this checkout's `dist/` and another's (`BENCH_AB_BASE`,
 * a checkout of an earlier commit, built). Whole `npm run bench` runs on this 2-core machine
 * drift by ~20 % from one run to the next, so a before/after figure taken from two runs says
 * little; here both builds serve at the same time and take turns under the same load.
 *
 *   git worktree add /tmp/base <commit> && (cd /tmp/base && npm ci && npm run build)
 *   npm run build && BENCH_AB_BASE=/tmp/base npx tsx test/bench/ab.ts
 *
 * Prints, for memory hits (identity and gzip clients): req/s and CPU per request of each build,
 * in rotating rounds (compareHits); for misses: the median latency of distinct cold questions,
 * asked of the emulator directly and of each build in turn, and each build's overhead over it.
 * Options: BENCH_DURATION_S (per build, default 20), BENCH_ROUNDS (default 4), BENCH_MISSES
 * (default 300).
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { Pool } from 'undici';
import { choosePage, compareHits, type HitFigures, type Page } from './measure.js';
import { installCleanup, pinSelf, stopAll } from './procs.js';
import { envNumber, fmt, printTable } from './report.js';
import { uniquePath } from './scenario-miss.js';
import { LOAD_CPU, startEmulator, startTmCache, type Server } from './servers.js';

const BASE = process.env['BENCH_AB_BASE'];
if (!BASE || !existsSync(join(BASE, 'dist/cli.js'))) {
  console.error('BENCH_AB_BASE must name a checkout with a built dist/cli.js (see the header of test/bench/ab.ts)');
  process.exit(2);
}
const DURATION_S = envNumber('BENCH_DURATION_S', 20);
const ROUNDS = envNumber('BENCH_ROUNDS', 4);
const MISSES = envNumber('BENCH_MISSES', 300);

installCleanup();
pinSelf(LOAD_CPU);
const emulator = await startEmulator();
try {
  const page = await choosePage(emulator);
  const base = await startTmCache(emulator.url, { name: `base (${BASE})`, cli: join(BASE, 'dist/cli.js') });
  const head = await startTmCache(emulator.url, { name: 'this checkout' });
  for (const [title, headers] of [['identity clients', {}], ['gzip clients', { 'accept-encoding': 'gzip' }]] as const) {
    const figures = await compareHits([base, head], page, { connections: 32, durationS: DURATION_S, warmupS: 2, rounds: ROUNDS, headers });
    printHits(`memory hit, ${title}: ${page.path}, 32 connections, ${ROUNDS} rotating rounds`, figures);
  }
  await printMisses(emulator, [base, head], page);
} finally {
  await stopAll();
}

function printHits(title: string, [b, h]: HitFigures[]): void {
  const row = (f: HitFigures) => [f.name, fmt(f.rps, 0), f.roundRps.map((r) => `${(r / 1000).toFixed(1)}k`).join(' '), fmt(f.cpuUsPerReq, 1), f.errors];
  printTable(title, ['build', 'req/s', 'rounds', 'CPU µs/req', 'errors'], [row(b!), row(h!)], [
    `this ÷ base: ${fmt(h!.rps / b!.rps)} by req/s, ${fmt(b!.cpuUsPerReq / h!.cpuUsPerReq)} by CPU per request (> 1: this checkout is faster)`,
  ]);
}

/** Distinct cold questions, asked of the emulator and of each build in turn (rotating order). */
async function printMisses(emulator: Server, builds: Server[], page: Page): Promise<void> {
  const targets = [emulator, ...builds];
  const pools = targets.map((t) => new Pool(t.url, { connections: 1 }));
  const times: number[][] = targets.map(() => []);
  for (let i = 0; i < MISSES; i++) {
    for (let k = 0; k < targets.length; k++) {
      const j = (i + k) % targets.length;
      const t0 = process.hrtime.bigint();
      const res = await pools[j]!.request({ method: 'GET', path: uniquePath(page), headers: { authorization: `Bearer ${page.token}` } });
      await res.body.arrayBuffer();
      if (res.statusCode !== 200) throw new Error(`${targets[j]!.name} answered ${res.statusCode}`);
      times[j]!.push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
  }
  await Promise.all(pools.map((p) => p.close()));
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
  const direct = median(times[0]!);
  printTable(
    `miss: ${MISSES} distinct cold questions each, one at a time, rotating`,
    ['asked', 'median ms', 'overhead over the emulator, ms'],
    targets.map((t, j) => [t.name, fmt(median(times[j]!), 3), j === 0 ? '' : fmt(median(times[j]!) - direct, 3)]),
  );
}
