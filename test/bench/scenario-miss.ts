/**
 * Scenario 2: what a miss costs over asking the emulator directly, over the leanest proxy,
 * nginx `proxy_pass` (no cache, keepalive upstream, one worker, pinned on the server core like
 * tm-cache), and over Node's own floor for a proxy (bare-proxy.ts: node:http and an undici Pool,
 * the body buffered, no cache, pinned likewise). The same ~300 distinct questions (the page with a unique `created_before`, so each
 * is a guaranteed miss) go one at a time to each, in rotating order so drift cancels.
 *
 * Scenario 3: coalescing. 1,000 concurrent identical cold requests on 1,000 connections; the
 * emulator must see one page request, and every client a 200.
 */
import { Pool } from 'undici';
import { timedGet, type Timed } from './questions.js';
import { header, type Page } from './measure.js';
import { fmt, maxCheck, median, printTable, quantile, ratioCheck, type Check } from './report.js';
import { RUNS_ROUTE } from './scenario-hit.js';
import { groupCpuSecondsPrecise } from './procs.js';
import type { Emulator, Server } from './servers.js';

/** Timestamps after every run of the dataset: the answer is the full page, the key is new. */
const BASE_MS = Date.UTC(2031, 0, 1);
let nextOffsetMs = 0;

/** The page with a `created_before` no request has used before. */
export function uniquePath(page: Page): string {
  const ts = new Date(BASE_MS + nextOffsetMs++).toISOString();
  return `${page.path}${page.path.includes('?') ? '&' : '?'}created_before=${encodeURIComponent(ts)}`;
}

export interface Latency {
  readonly median: number;
  readonly p90: number;
  readonly mean: number;
}

export interface MissScenario {
  /** tm-cache's CPU time per miss (process group, all threads), µs. */
  readonly proxyCpuUsPerMiss: number;
  /** nginx proxy_pass's CPU time per miss, µs; undefined without nginx. */
  readonly nginxCpuUsPerMiss?: number;
  readonly direct: Latency;
  readonly proxied: Latency;
  readonly nginx?: Latency;
  readonly medianOverheadMs: number;
  readonly medianPairedOverheadMs: number;
  /** tm-cache ÷ nginx proxy_pass: median latency and CPU per miss. */
  readonly vsNginx?: { readonly median: number; readonly p90: number; readonly cpu: number };
  /** The bare node proxy (bare-proxy.ts): its latency and CPU per miss, and tm-cache ÷ it. */
  readonly bare?: Latency;
  readonly bareCpuUsPerMiss?: number;
  readonly vsBare?: { readonly median: number; readonly p90: number; readonly cpu: number };
  readonly pairs: number;
  readonly proxiedMisses: number;
  readonly checks: Check[];
}

const summary = (xs: number[]): Latency => ({ median: median(xs), p90: quantile(xs, 0.9), mean: xs.reduce((a, b) => a + b, 0) / xs.length });

/**
 * The same distinct cold questions asked of the emulator directly, through tm-cache and (when
 * `nginx` is given) through nginx `proxy_pass`: each question goes to all of them in a rotating
 * order, one at a time, so drift and the emulator's own caching fall on all alike.
 */
export async function runMissScenario(
  emulator: Emulator,
  proxy: Server,
  page: Page,
  pairs: number,
  nginx: Server | undefined,
  bare: Server | undefined,
): Promise<MissScenario> {
  const targets = [emulator, proxy, ...(nginx ? [nginx] : []), ...(bare ? [bare] : [])];
  const bareAt = targets.length - 1;
  const pools = targets.map((t) => new Pool(t.url, { connections: 1 }));
  try {
    const one = async (turn: number): Promise<Timed[]> => {
      const path = uniquePath(page);
      const out: Timed[] = [];
      for (let k = 0; k < pools.length; k++) {
        const i = (turn + k) % pools.length;
        out[i] = await timedGet(pools[i]!, path, { authorization: `Bearer ${page.token}` });
      }
      return out;
    };
    // Warm-up: connections, JIT on every side, and tm-cache's identity memo for the token.
    for (let i = 0; i < 30; i++) await one(i);
    const times: number[][] = targets.map(() => []);
    const diffs: number[] = [];
    let misses = 0;
    const cpu = () => [
      groupCpuSecondsPrecise(proxy.proc.pid),
      nginx ? groupCpuSecondsPrecise(nginx.proc.pid) : NaN,
      bare ? groupCpuSecondsPrecise(bare.proc.pid) : NaN,
    ];
    const cpuBefore = cpu();
    for (let q = 0; q < pairs; q++) {
      const got = await one(q);
      const [d, p] = [got[0]!, got[1]!];
      for (const [i, t] of got.entries()) {
        if (t.status !== 200 || t.bytes !== d.bytes)
          throw new Error(`question ${q}: direct ${d.status}/${d.bytes} B, via ${targets[i]!.name} ${t.status}/${t.bytes} B`);
        times[i]!.push(t.ms);
      }
      if (p.cacheStatus.includes('fwd=')) misses++;
      diffs.push(p.ms - d.ms);
    }
    const cpuAfter = cpu();
    const perMissUs = (i: number) => ((cpuAfter[i]! - cpuBefore[i]!) * 1e6) / pairs;
    const [direct, proxied] = [summary(times[0]!), summary(times[1]!)];
    const viaNginx = nginx ? summary(times[2]!) : undefined;
    const nginxCpuUsPerMiss = nginx ? perMissUs(1) : undefined;
    const proxyCpuUsPerMiss = perMissUs(0);
    const viaBare = bare ? summary(times[bareAt]!) : undefined;
    const bareCpuUsPerMiss = bare ? perMissUs(2) : undefined;
    const vsBare =
      viaBare && bareCpuUsPerMiss
        ? { median: proxied.median / viaBare.median, p90: proxied.p90 / viaBare.p90, cpu: proxyCpuUsPerMiss / bareCpuUsPerMiss }
        : undefined;
    const vsNginx =
      viaNginx && nginxCpuUsPerMiss
        ? { median: proxied.median / viaNginx.median, p90: proxied.p90 / viaNginx.p90, cpu: proxyCpuUsPerMiss / nginxCpuUsPerMiss }
        : undefined;
    const result = {
      proxyCpuUsPerMiss,
      ...(nginxCpuUsPerMiss === undefined ? {} : { nginxCpuUsPerMiss }),
      direct,
      proxied,
      ...(viaNginx ? { nginx: viaNginx } : {}),
      medianOverheadMs: proxied.median - direct.median,
      medianPairedOverheadMs: median(diffs),
      ...(vsNginx ? { vsNginx } : {}),
      ...(viaBare ? { bare: viaBare, bareCpuUsPerMiss } : {}),
      ...(vsBare ? { vsBare } : {}),
      pairs,
      proxiedMisses: misses,
    };
    const row = (name: string, l: Latency, cpuUs?: number) => [
      name,
      fmt(l.median, 3),
      fmt(l.p90, 3),
      fmt(l.mean, 3),
      fmt(l.median - direct.median, 3),
      cpuUs === undefined ? '' : fmt(cpuUs, 0),
    ];
    printTable(
      `2. Miss: ${pairs} distinct cold questions (${page.body.length} B each), one at a time, each asked of ${targets.map((t) => t.name).join(', ')} in rotating order`,
      ['path', 'median ms', 'p90 ms', 'mean ms', 'median − direct', 'CPU µs/miss'],
      [
        row('emulator directly', direct),
        ...(viaNginx ? [row('via nginx proxy_pass', viaNginx, nginxCpuUsPerMiss)] : []),
        ...(viaBare ? [row('via the bare node proxy', viaBare, bareCpuUsPerMiss)] : []),
        row('via tm-cache (miss)', proxied, proxyCpuUsPerMiss),
      ],
      [
        `median of per-question differences tm-cache − direct: ${fmt(result.medianPairedOverheadMs, 3)} ms; tm-cache reported a miss (fwd=) for ${misses}/${pairs}.`,
        vsNginx
          ? `tm-cache ÷ nginx proxy_pass: median latency ${fmt(vsNginx.median)}× (target ≤ 1.15), p90 ${fmt(vsNginx.p90)}×, CPU per miss ${fmt(vsNginx.cpu)}× (target ≤ 2).`
          : 'nginx not found: no proxy_pass baseline (install: apt-get install nginx-light).',
        ...(vsBare
          ? [
              `tm-cache ÷ the bare node proxy (bare-proxy.ts: node:http + an undici Pool, body buffered, no cache): median latency ${fmt(vsBare.median)}× (target ≤ 1.25),`,
              `  p90 ${fmt(vsBare.p90)}×, CPU per miss ${fmt(vsBare.cpu)}× (target ≤ 1.25): what a miss costs above Node's own floor for a proxy.`,
            ]
          : []),
        "CPU per miss: every thread of the server's process group (schedstat, ns), over the measured questions only.",
        "Where tm-cache's miss CPU goes: npm run bench -- profile:miss (top self-time frames, GC share).",
      ],
    );
    return {
      ...result,
      checks: [
        { name: 'miss: median overhead vs emulator', value: result.medianOverheadMs, unit: 'ms', target: '< 1 ms', pass: result.medianOverheadMs < 1 },
        maxCheck('miss: tm-cache ÷ nginx proxy_pass, median latency', vsNginx?.median, 1.15),
        maxCheck('miss: tm-cache ÷ nginx proxy_pass, CPU per miss', vsNginx?.cpu, 2),
        maxCheck('miss: tm-cache ÷ bare node proxy, median latency', vsBare?.median, 1.25),
        maxCheck('miss: tm-cache ÷ bare node proxy, CPU per miss', vsBare?.cpu, 1.25),
        { name: 'miss: tm-cache CPU per miss', value: proxyCpuUsPerMiss, unit: 'µs', target: 'info', pass: undefined },
        { name: 'miss: nginx proxy_pass CPU per miss', value: nginxCpuUsPerMiss, unit: 'µs', target: 'info', pass: undefined },
      ],
    };
  } finally {
    await Promise.all(pools.map((pool) => pool.close()));
  }
}

export interface CoalesceScenario {
  readonly concurrent: number;
  readonly ok: number;
  readonly upstreamRequests: number;
  readonly elapsedMs: number;
  readonly outcomes: Record<string, number>;
  readonly checks: Check[];
}

export async function runCoalesceScenario(emulator: Emulator, proxy: Server, page: Page, concurrent: number): Promise<CoalesceScenario> {
  const path = uniquePath(page);
  const pool = new Pool(proxy.url, { connections: concurrent, pipelining: 1, connect: { timeout: 30_000 } });
  try {
    // Identity known first (scenario 2 did it), so only the page itself is counted.
    await emulator.resetStats();
    const t0 = performance.now();
    const all = await Promise.allSettled(
      Array.from({ length: concurrent }, async () => {
        const res = await pool.request({
          method: 'GET',
          path,
          headers: { authorization: `Bearer ${page.token}` },
          headersTimeout: 30_000,
          bodyTimeout: 30_000,
        });
        const body = Buffer.from(await res.body.arrayBuffer());
        return { status: res.statusCode, bytes: body.length, cacheStatus: header({ status: 0, body, headers: res.headers }, 'cache-status') };
      }),
    );
    const elapsedMs = performance.now() - t0;
    const upstreamRequests = (await emulator.stats()).by_route[RUNS_ROUTE] ?? 0;
    const outcomes: Record<string, number> = {};
    let ok = 0;
    for (const r of all) {
      const label = r.status === 'rejected' ? `error: ${String(r.reason).slice(0, 60)}` : `${r.value.status} ${r.value.cacheStatus.replace(/; ttl=\d+/, '')}`;
      outcomes[label] = (outcomes[label] ?? 0) + 1;
      if (r.status === 'fulfilled' && r.value.status === 200 && r.value.bytes === page.body.length) ok++;
    }
    printTable(
      `3. Coalescing: ${concurrent} concurrent identical cold requests (${concurrent} connections)`,
      ['figure', 'value'],
      [
        ['answered 200 with the full page', `${ok} / ${concurrent}`],
        ['page requests that reached the emulator', upstreamRequests],
        ['wall time for all', `${fmt(elapsedMs, 0)} ms`],
        ...Object.entries(outcomes).map(([k, v]): [string, number] => [`  ${k}`, v]),
      ],
    );
    return {
      concurrent,
      ok,
      upstreamRequests,
      elapsedMs,
      outcomes,
      checks: [
        { name: `coalescing: upstream requests for ${concurrent} cold`, value: upstreamRequests, target: '= 1', pass: upstreamRequests === 1, unit: '' },
        ratioCheck(`coalescing: share answered 200`, ok / concurrent, 1),
      ],
    };
  } finally {
    await pool.close();
  }
}
