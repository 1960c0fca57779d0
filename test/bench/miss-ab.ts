/**
 * `ab:miss`: a miss, side by side with nginx `proxy_pass` (no cache, keepalive upstream, one
 * worker): the latency and CPU a miss costs through tm-cache against what the plainest reverse
 * proxy pays for the same answer. Optionally a second tm-cache build too (`--base`, as in
 * ab:hit), so a change to the miss path is judged against its base in the same run.
 *
 *   npm run bench -- ab:miss
 *   npm run bench -- ab:miss --base /work/wt-perf-base
 *
 * Every server sits on the server core (nginx, tm-cache, the base), the emulator and this runner
 * on the load core. N distinct cold questions (the bench page with a unique `created_before`:
 * scenario-miss.ts uniquePath) go one at a time to each server in rotating order, so drift falls
 * on all alike. Latency: the client's wall time for the whole answer, median and p90. CPU per
 * miss: the server's process group CPU time over the loop ÷ N, read two ways: from
 * /proc/<pid>/task/<tid>/schedstat (nanoseconds, every thread: the precise figure) and from
 * utime+stime of /proc/<pid>/stat (10 ms ticks, the same count the `miss` scenario prints).
 * Knobs: --misses (600), --miss-warmup (300), --bare-proxy (also the floor of a node proxy:
 * bare-proxy.ts, a raw http server forwarding through undici, no cache), --nginx-cache (also nginx
 * proxy_cache, peers.ts: a cache's miss, which stores the answer as tm-cache does, where
 * proxy_pass stores nothing), --no-store (also a tm-cache whose memory tier keeps nothing),
 * --node-flags (`;`-separated sets of node flags: one more tm-cache of this checkout per set,
 * e.g. `--max-semi-space-size=32;--single-threaded-gc`, to weigh GC settings), --configs (JSON
 * {name: YAML}: one more tm-cache per config).
 */
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Pool } from 'undici';
import type { Page } from './measure.js';
import { makeNginxPassConf, startNginx } from './peers.js';
import { freePort, groupCpuSeconds, groupCpuSecondsPrecise } from './procs.js';
import { fmt, maxCheck, median, printTable, quantile, ratioCheck, type Check } from './report.js';
import { uniquePath } from './scenario-miss.js';
import { SERVER_CPU, startBareProxy, startTmCache, type Emulator, type Server } from './servers.js';

async function startNginxProxyPass(dir: string, upstream: string): Promise<Server> {
  const u = new URL(upstream);
  const peer = await startNginx(dir, await freePort(), { host: u.hostname, port: Number(u.port) }, SERVER_CPU, makeNginxPassConf, 'nginx proxy_pass');
  if (typeof peer === 'string') throw new Error(peer);
  return peer;
}

/** CPU nanoseconds run so far by each thread name (comm) of every live process in the group `pgid` (schedstat). */
function threadCpuNs(pgid: number): Map<string, number> {
  const out = new Map<string, number>();
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[2]) !== pgid) continue;
      for (const tid of readdirSync(`/proc/${pid}/task`)) {
        const name = tid === pid ? 'main' : readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim();
        const ns = Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
        out.set(name, (out.get(name) ?? 0) + ns);
      }
    } catch {
      // the process or thread exited meanwhile
    }
  }
  return out;
}

/** Where each server's CPU went, by thread name, in µs per miss. */
function threadRows(before: Map<string, number>[], after: Map<string, number>[], rows: Row[], count: number): string[] {
  return rows.map((r, j) => {
    const parts = [...after[j]!].map(([name, ns]): [string, number] => [name, (ns - (before[j]!.get(name) ?? 0)) / 1e3 / count]).filter(([, us]) => us >= 1);
    return `${r.server.name}: ${parts.map(([name, us]) => `${name} ${fmt(us, 0)}`).join(', ')} (µs per miss by thread)`;
  });
}

interface Row {
  readonly server: Server;
  readonly pool: Pool;
  readonly ms: number[];
  misses: number;
}

async function ask(row: Row, page: Page): Promise<void> {
  const t0 = process.hrtime.bigint();
  const res = await row.pool.request({ method: 'GET', path: uniquePath(page), headers: { authorization: `Bearer ${page.token}` } });
  const body = Buffer.from(await res.body.arrayBuffer());
  row.ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
  if (res.statusCode !== 200 || body.length !== page.body.length) throw new Error(`${row.server.name} answered ${res.statusCode} with ${body.length} B`);
  if (String(res.headers['cache-status'] ?? '').includes('fwd=uri-miss')) row.misses++;
}

interface AbMissOptions {
  readonly misses: number;
  readonly warmup: number;
  /** Another checkout, built: one more tm-cache. */
  readonly base?: string | undefined;
  readonly bareProxy: boolean;
  readonly nginxCache: boolean;
  readonly noStore: boolean;
  /** `;`-separated sets of node flags. */
  readonly nodeFlags?: string | undefined;
  /** JSON {name: YAML}. */
  readonly configs?: string | undefined;
}

interface AbMissRow {
  readonly server: string;
  readonly medianMs: number;
  readonly p90Ms: number;
  readonly cpuUsPerMiss: number;
  readonly cpuUsPerMissTicks: number;
  readonly uriMisses?: number;
}

interface AbMiss {
  readonly rows: AbMissRow[];
  readonly checks: Check[];
}

export async function runAbMiss(emulator: Emulator, page: Page, dir: string, options: AbMissOptions): Promise<AbMiss> {
  const count = options.misses;
  const servers = [await startNginxProxyPass(dir, emulator.url), await startTmCache(emulator.url, { name: 'tm-cache (this checkout)' })];
  for (const flags of (options.nodeFlags ?? '').split(';').filter((f) => f.trim() !== '')) {
    servers.push(await startTmCache(emulator.url, { name: `tm-cache ${flags.trim()}`, nodeArgs: flags.trim().split(/\s+/) }));
  }
  if (options.noStore) {
    const config = join(dir, 'no-store.yaml');
    writeFileSync(config, 'cache:\n  memory:\n    maxEntryBytes: 1\n');
    servers.push(await startTmCache(emulator.url, { name: 'tm-cache, memory keeps nothing', env: { TM_CACHE_CONFIG: config } }));
  }
  for (const [name, yaml] of Object.entries(JSON.parse(options.configs ?? '{}') as Record<string, string>)) {
    const config = join(dir, `variant-${servers.length}.yaml`);
    writeFileSync(config, yaml);
    servers.push(await startTmCache(emulator.url, { name: `tm-cache ${name}`, env: { TM_CACHE_CONFIG: config } }));
  }
  if (options.nginxCache) {
    const u = new URL(emulator.url);
    const peer = await startNginx(join(dir, 'cache'), await freePort(), { host: u.hostname, port: Number(u.port) }, SERVER_CPU);
    if (typeof peer === 'string') throw new Error(peer);
    servers.push({ ...peer, name: 'nginx proxy_cache' });
  }
  if (options.bareProxy) servers.push(await startBareProxy(emulator.url));
  if (options.base) servers.push(await startTmCache(emulator.url, { name: `tm-cache base (${options.base})`, cli: join(options.base, 'dist/cli.js') }));
  const rows: Row[] = servers.map((server) => ({ server, pool: new Pool(server.url, { connections: 1 }), ms: [], misses: 0 }));
  for (let i = 0; i < options.warmup; i++) for (const row of rows) await ask(row, page);
  for (const row of rows) {
    row.ms.length = 0;
    row.misses = 0;
  }
  const threads0 = rows.map((r) => threadCpuNs(r.server.proc.pid));
  const ns0 = rows.map((r) => groupCpuSecondsPrecise(r.server.proc.pid) * 1e9);
  const s0 = rows.map((r) => groupCpuSeconds(r.server.proc.pid));
  for (let i = 0; i < count; i++) for (let k = 0; k < rows.length; k++) await ask(rows[(i + k) % rows.length]!, page);
  const cpuNs = rows.map((r, j) => groupCpuSecondsPrecise(r.server.proc.pid) * 1e9 - ns0[j]!);
  const threads1 = rows.map((r) => threadCpuNs(r.server.proc.pid));
  const cpuTicksS = rows.map((r, j) => groupCpuSeconds(r.server.proc.pid) - s0[j]!);
  await Promise.all(rows.map((r) => r.pool.close()));
  const nginx = { ms: median(rows[0]!.ms), cpuUs: cpuNs[0]! / 1e3 / count };
  const out: AbMissRow[] = rows.map((r, j) => ({
    server: r.server.name,
    medianMs: median(r.ms),
    p90Ms: quantile(r.ms, 0.9),
    cpuUsPerMiss: cpuNs[j]! / 1e3 / count,
    cpuUsPerMissTicks: (cpuTicksS[j]! * 1e6) / count,
    ...(j === 0 ? {} : { uriMisses: r.misses }),
  }));
  printTable(
    `miss vs nginx proxy_pass: ${count} distinct cold questions each, one at a time, rotating; ${page.path} (${page.body.length} B)`,
    ['server', 'median ms', 'p90 ms', 'median ÷ nginx', 'CPU µs/miss', 'CPU ÷ nginx', 'CPU µs/miss (stat ticks)', 'fwd=uri-miss'],
    out.map((r, j) => [
      r.server,
      fmt(r.medianMs, 3),
      fmt(r.p90Ms, 3),
      fmt(r.medianMs / nginx.ms),
      fmt(r.cpuUsPerMiss, 0),
      fmt(r.cpuUsPerMiss / nginx.cpuUs),
      fmt(r.cpuUsPerMissTicks, 0),
      j === 0 ? '' : `${r.uriMisses}/${count}`,
    ]),
    [
      'targets: median ≤ 1.15× nginx, CPU per miss ≤ 2× nginx. CPU: schedstat of every thread of the process group.',
      'taken on a shared 2-core machine: compare the rows with each other, not with another run.',
      ...threadRows(threads0, threads1, rows, count),
    ],
  );
  return {
    rows: out,
    // The targets are tm-cache's; the other rows (nginx proxy_cache, the bare proxy) are for reading them against.
    checks: out.slice(1).flatMap((r) => {
      const [latency, cpu] = [r.medianMs / nginx.ms, r.cpuUsPerMiss / nginx.cpuUs];
      const names = [`ab:miss: ${r.server} ÷ nginx proxy_pass, median latency`, `ab:miss: ${r.server} ÷ nginx proxy_pass, CPU per miss`] as const;
      return r.server.startsWith('tm-cache')
        ? [maxCheck(names[0], latency, 1.15), maxCheck(names[1], cpu, 2)]
        : [ratioCheck(names[0], latency, undefined), ratioCheck(names[1], cpu, undefined)];
    }),
  };
}
