/**
 * `ab:hit`: two builds side by side, in one run: this checkout's `dist/` and another's (`--base`,
 * a checkout of an earlier commit, built). Whole bench runs on this 2-core machine drift by ~20 %
 * from one run to the next, so a before/after figure taken from two runs says little; here both
 * builds serve at the same time and take turns under the same load.
 *
 *   git worktree add /tmp/base <commit> && (cd /tmp/base && npm ci && npm run build)
 *   npm run bench -- ab:hit --base /tmp/base
 *
 * Prints, for memory hits (identity and gzip clients): req/s and CPU per request of each build,
 * in rotating rounds (compareHits); for misses: the median latency of distinct cold questions,
 * asked of the emulator directly and of each build in turn, and each build's overhead over it.
 * Knobs: --duration (per build, 20), --rounds (4), --misses (300).
 */
import { join } from 'node:path';
import { Pool } from 'undici';
import { compareHits, type HitFigures, type Page } from './measure.js';
import { fmt, printTable, ratioCheck, type Check } from './report.js';
import { uniquePath } from './scenario-miss.js';
import { startTmCache, type Emulator, type Server } from './servers.js';

interface AbHitOptions {
  /** The other checkout, built. */
  readonly base: string;
  readonly durationS: number;
  readonly rounds: number;
  readonly misses: number;
}

interface AbHitRun {
  readonly clients: string;
  readonly base: HitFigures;
  readonly head: HitFigures;
  /** this ÷ base: by req/s, and by CPU per request (> 1: this checkout is faster). */
  readonly byRps: number;
  readonly byCpu: number;
}

interface AbHit {
  readonly hits: AbHitRun[];
  readonly missMedianMs: Record<string, number>;
  readonly checks: Check[];
}

export async function runAbHit(emulator: Emulator, page: Page, options: AbHitOptions): Promise<AbHit> {
  const base = await startTmCache(emulator.url, { name: `base (${options.base})`, cli: join(options.base, 'dist/cli.js') });
  const head = await startTmCache(emulator.url, { name: 'this checkout' });
  const hits: AbHitRun[] = [];
  for (const [clients, headers] of [
    ['identity clients', {}],
    ['gzip clients', { 'accept-encoding': 'gzip' }],
  ] as const) {
    const [b, h] = await compareHits([base, head], page, { connections: 32, durationS: options.durationS, warmupS: 2, rounds: options.rounds, headers });
    const run = { clients, base: b!, head: h!, byRps: h!.rps / b!.rps, byCpu: b!.cpuUsPerReq / h!.cpuUsPerReq };
    printHits(`memory hit, ${clients}: ${page.path}, 32 connections, ${options.rounds} rotating rounds`, run);
    hits.push(run);
  }
  const missMedianMs = await printMisses(emulator, [base, head], page, options.misses);
  return {
    hits,
    missMedianMs,
    checks: [
      ...hits.flatMap((r) => [
        ratioCheck(`ab:hit, ${r.clients}: this ÷ base (req/s)`, r.byRps, undefined),
        ratioCheck(`ab:hit, ${r.clients}: this ÷ base (CPU per request)`, r.byCpu, undefined),
      ]),
      {
        name: 'ab:hit, miss: median overhead over the emulator, base',
        value: missMedianMs[base.name]! - missMedianMs[emulator.name]!,
        unit: 'ms',
        target: 'info',
        pass: undefined,
      },
      {
        name: 'ab:hit, miss: median overhead over the emulator, this',
        value: missMedianMs[head.name]! - missMedianMs[emulator.name]!,
        unit: 'ms',
        target: 'info',
        pass: undefined,
      },
    ],
  };
}

function printHits(title: string, run: AbHitRun): void {
  const row = (f: HitFigures) => [f.name, fmt(f.rps, 0), f.roundRps.map((r) => `${(r / 1000).toFixed(1)}k`).join(' '), fmt(f.cpuUsPerReq, 1), f.errors];
  printTable(
    title,
    ['build', 'req/s', 'rounds', 'CPU µs/req', 'errors'],
    [row(run.base), row(run.head)],
    [`this ÷ base: ${fmt(run.byRps)} by req/s, ${fmt(run.byCpu)} by CPU per request (> 1: this checkout is faster)`],
  );
}

/** Distinct cold questions, asked of the emulator and of each build in turn (rotating order): median ms by server. */
async function printMisses(emulator: Server, builds: Server[], page: Page, misses: number): Promise<Record<string, number>> {
  const targets = [emulator, ...builds];
  const pools = targets.map((t) => new Pool(t.url, { connections: 1 }));
  const times: number[][] = targets.map(() => []);
  for (let i = 0; i < misses; i++) {
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
    `miss: ${misses} distinct cold questions each, one at a time, rotating`,
    ['asked', 'median ms', 'overhead over the emulator, ms'],
    targets.map((t, j) => [t.name, fmt(median(times[j]!), 3), j === 0 ? '' : fmt(median(times[j]!) - direct, 3)]),
  );
  return Object.fromEntries(targets.map((t, j) => [t.name, median(times[j]!)]));
}
