/**
 * Scenario 2: what a miss costs over asking the emulator directly. The same ~300 distinct
 * questions (the page with a unique `created_before`, so each is a guaranteed miss) go one at a
 * time to the emulator and through tm-cache, alternating which goes first so drift cancels.
 *
 * Scenario 3: coalescing. 1,000 concurrent identical cold requests on 1,000 connections; the
 * emulator must see one page request, and every client a 200.
 */
import { Pool } from 'undici';
import { header, type Page } from './measure.js';
import { fmt, median, printTable, quantile, ratioCheck, type Check } from './report.js';
import { RUNS_ROUTE } from './scenario-hit.js';
import { groupCpuSeconds } from './procs.js';
import type { Emulator, Server } from './servers.js';

/** Timestamps after every run of the dataset: the answer is the full page, the key is new. */
const BASE_MS = Date.UTC(2031, 0, 1);
let nextOffsetMs = 0;

/** The page with a `created_before` no request has used before. */
export function uniquePath(page: Page): string {
  const ts = new Date(BASE_MS + nextOffsetMs++).toISOString();
  return `${page.path}${page.path.includes('?') ? '&' : '?'}created_before=${encodeURIComponent(ts)}`;
}

interface Timed {
  readonly ms: number;
  readonly status: number;
  readonly bytes: number;
  readonly cacheStatus: string;
}

async function timedGet(pool: Pool, path: string, token: string): Promise<Timed> {
  const t0 = process.hrtime.bigint();
  const res = await pool.request({ method: 'GET', path, headers: { authorization: `Bearer ${token}` } });
  const body = Buffer.from(await res.body.arrayBuffer());
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  const cs = res.headers['cache-status'];
  return { ms, status: res.statusCode, bytes: body.length, cacheStatus: Array.isArray(cs) ? cs.join(', ') : (cs ?? '') };
}

export interface MissScenario {
  /** tm-cache's CPU time per miss (process group), µs. */
  readonly proxyCpuUsPerMiss: number;
  readonly direct: { median: number; p90: number; mean: number };
  readonly proxied: { median: number; p90: number; mean: number };
  readonly medianOverheadMs: number;
  readonly medianPairedOverheadMs: number;
  readonly pairs: number;
  readonly proxiedMisses: number;
  readonly checks: Check[];
}

const summary = (xs: number[]) => ({ median: median(xs), p90: quantile(xs, 0.9), mean: xs.reduce((a, b) => a + b, 0) / xs.length });

export async function runMissScenario(emulator: Emulator, proxy: Server, page: Page, pairs: number): Promise<MissScenario> {
  const direct = new Pool(emulator.url, { connections: 1 });
  const proxied = new Pool(proxy.url, { connections: 1 });
  try {
    const one = async (order: 'direct-first' | 'proxy-first') => {
      const path = uniquePath(page);
      if (order === 'direct-first') {
        const d = await timedGet(direct, path, page.token);
        return { d, p: await timedGet(proxied, path, page.token) };
      }
      const p = await timedGet(proxied, path, page.token);
      return { d: await timedGet(direct, path, page.token), p };
    };
    // Warm-up: connections, JIT on both sides, and tm-cache's identity memo for the token.
    for (let i = 0; i < 30; i++) await one(i % 2 === 0 ? 'direct-first' : 'proxy-first');
    const d: number[] = [];
    const p: number[] = [];
    const diffs: number[] = [];
    let misses = 0;
    const cpuBefore = groupCpuSeconds(proxy.proc.pid);
    for (let i = 0; i < pairs; i++) {
      const { d: a, p: b } = await one(i % 2 === 0 ? 'direct-first' : 'proxy-first');
      if (a.status !== 200 || b.status !== 200 || a.bytes !== b.bytes) {
        throw new Error(`question ${i}: direct ${a.status}/${a.bytes} B, via tm-cache ${b.status}/${b.bytes} B`);
      }
      if (b.cacheStatus.includes('fwd=')) misses++;
      d.push(a.ms);
      p.push(b.ms);
      diffs.push(b.ms - a.ms);
    }
    const proxyCpuUsPerMiss = ((groupCpuSeconds(proxy.proc.pid) - cpuBefore) * 1e6) / pairs;
    const result = {
      proxyCpuUsPerMiss,
      direct: summary(d),
      proxied: summary(p),
      medianOverheadMs: median(p) - median(d),
      medianPairedOverheadMs: median(diffs),
      pairs,
      proxiedMisses: misses,
    };
    printTable(
      `2. Miss overhead: ${pairs} distinct cold questions, one at a time, alternating direct / via tm-cache`,
      ['path', 'median ms', 'p90 ms', 'mean ms'],
      [
        ['emulator directly', fmt(result.direct.median, 3), fmt(result.direct.p90, 3), fmt(result.direct.mean, 3)],
        ['via tm-cache (miss)', fmt(result.proxied.median, 3), fmt(result.proxied.p90, 3), fmt(result.proxied.mean, 3)],
        ['difference', fmt(result.medianOverheadMs, 3), fmt(result.proxied.p90 - result.direct.p90, 3), fmt(result.proxied.mean - result.direct.mean, 3)],
      ],
      [
        `median of per-question differences: ${fmt(result.medianPairedOverheadMs, 3)} ms; tm-cache reported a miss (fwd=) for ${misses}/${pairs}.`,
        `tm-cache CPU per miss: ${fmt(proxyCpuUsPerMiss, 0)} µs (the rest of the difference is the extra hop: the 87 KB body is received whole, then sent).`,
      ],
    );
    return {
      ...result,
      checks: [{ name: 'miss: median overhead vs emulator', value: result.medianOverheadMs, unit: 'ms', target: '< 1 ms', pass: result.medianOverheadMs < 1 }],
    };
  } finally {
    await Promise.all([direct.close(), proxied.close()]);
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
        const res = await pool.request({ method: 'GET', path, headers: { authorization: `Bearer ${page.token}` }, headersTimeout: 30_000, bodyTimeout: 30_000 });
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
