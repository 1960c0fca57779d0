/**
 * One throughput measurement of one server: check it answers the page right, warm it up, then
 * wrk for a fixed time while reading how much CPU the server's process group used.
 */
import { gunzipSync } from 'node:zlib';
import { request } from 'undici';
import { coreBusyPct, coreTimes, groupCpuSeconds, groupCpuSecondsPrecise } from './procs.js';
import { LOAD_CPU, SERVER_CPU, type Emulator, type Server } from './servers.js';
import { runWrk, type WrkResult } from './wrk.js';

export interface Page {
  /** Path and query, e.g. `/api/v1/projects/1/runs?expands=users`. */
  readonly path: string;
  readonly token: string;
  /** What the emulator answers for it directly: the bytes every server must send. */
  readonly body: Buffer;
  readonly contentType: string;
}

export interface Fetched {
  readonly status: number;
  readonly body: Buffer;
  readonly headers: Record<string, string | string[] | undefined>;
}

export async function fetchPage(url: string, token: string | undefined, extra: Record<string, string> = {}): Promise<Fetched> {
  const res = await request(url, { headers: { ...(token === undefined ? {} : { authorization: `Bearer ${token}` }), ...extra } });
  const raw = Buffer.from(await res.body.arrayBuffer());
  // The body as the client reads it: a gzip answer is decoded, so it compares with the page.
  const body = res.headers['content-encoding'] === 'gzip' ? gunzipSync(raw) : raw;
  return { status: res.statusCode, body, headers: res.headers };
}

/** A member (not admin) token and a project of theirs with a full first page of runs. */
export async function choosePage(emulator: Emulator): Promise<Page> {
  for (const t of emulator.tokens.filter((t) => !t.is_admin && t.project_ids.length > 0)) {
    for (const project of t.project_ids) {
      const path = `/api/v1/projects/${project}/runs?expands=users`;
      const got = await fetchPage(emulator.url + path, t.token);
      if (got.status !== 200) continue;
      const json = JSON.parse(got.body.toString('utf8')) as { total: number; result: unknown[] };
      if (json.total >= 100 && json.result.length === 100) {
        return { path, token: t.token, body: got.body, contentType: String(got.headers['content-type']) };
      }
    }
  }
  throw new Error('no member token with a project of ≥ 100 runs in the emulator');
}

export function header(f: Fetched, name: string): string {
  const v = f.headers[name];
  return Array.isArray(v) ? v.join(', ') : (v ?? '');
}

/** Throws unless `server` answers the page with 200 and the reference body's length. */
async function assertServesPage(server: Server, page: Page, extra: Record<string, string> = {}): Promise<Fetched> {
  const got = await fetchPage(server.url + page.path, page.token, extra);
  if (got.status !== 200 || got.body.length !== page.body.length) {
    throw new Error(
      `${server.name} answered ${got.status} with ${got.body.length} bytes, expected 200 with ${page.body.length}: ${got.body.subarray(0, 200).toString()}`,
    );
  }
  return got;
}

export interface HitFigures {
  readonly name: string;
  /** All rounds' requests ÷ all rounds' durations. */
  readonly rps: number;
  /** req/s of each round, in the order run: their spread is the run's noise. */
  readonly roundRps: number[];
  /** CPU µs per request of each round, in the order run: paired with another server's rounds, a ratio per round. */
  readonly roundCpuUsPerReq: number[];
  /** Medians over the rounds of wrk's per-round percentiles. */
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly requests: number;
  /** Server CPU use during the runs, in % of one core (100 = the pinned core saturated). */
  readonly cpuPct: number;
  /** Server CPU time per request, in µs. */
  readonly cpuUsPerReq: number;
  /**
   * What one core could serve at that cost (1e6 / cpuUsPerReq): the server's capacity even when
   * the load generator, not the server, was the limit of `rps` (server CPU % well under 100).
   */
  readonly capacityRps: number;
  /** Busy % of the load core (wrk) and of the server core during the runs. */
  readonly loadCorePct: number;
  readonly serverCorePct: number;
  readonly errors: number;
  /** Body bytes equal to the reference (not only the length). */
  readonly sameBytes: boolean;
}

export interface LoadOptions {
  readonly connections: number;
  /** Total measured seconds per server, split over the rounds. */
  readonly durationS: number;
  readonly warmupS: number;
  /**
   * The servers take turns, one slice each per round, in an order that rotates each round: the
   * machine's drift (a noisy neighbour, frequency changes) then falls on all of them alike.
   */
  readonly rounds: number;
  /** Extra request headers of every client, e.g. `{ 'accept-encoding': 'gzip' }` (browsers, SDKs). */
  readonly headers?: Readonly<Record<string, string>>;
}

interface Slice {
  readonly wrk: WrkResult;
  readonly cpuS: number;
  readonly wallS: number;
  readonly busy: Record<number, number>;
}

export async function measureSlice(
  server: Server,
  page: Page,
  connections: number,
  durationS: number,
  extra: Readonly<Record<string, string>> = {},
  /** CPU from the scheduler's nanosecond counters (schedstat), not 10 ms ticks: for short slices. */
  precise = false,
): Promise<Slice> {
  const headers = { authorization: `Bearer ${page.token}`, ...extra };
  const groupCpu = precise ? groupCpuSecondsPrecise : groupCpuSeconds;
  const cpuBefore = groupCpu(server.proc.pid);
  const coresBefore = coreTimes();
  const t0 = performance.now();
  const wrk = await runWrk({ url: server.url + page.path, connections, durationS, headers });
  const wallS = (performance.now() - t0) / 1_000;
  return { wrk, cpuS: groupCpu(server.proc.pid) - cpuBefore, wallS, busy: coreBusyPct(coresBefore, coreTimes()) };
}

const med = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};
const sum = (xs: number[]): number => xs.reduce((a, b) => a + b, 0);

/**
 * Cache-hit throughput of several servers that are all running: each is checked, warmed up, then
 * measured in `rounds` rotating slices of `durationS / rounds` seconds.
 */
export async function compareHits(servers: readonly Server[], page: Page, load: LoadOptions): Promise<HitFigures[]> {
  const first = new Map<Server, Fetched>();
  const extra = load.headers ?? {};
  for (const server of servers) first.set(server, await assertServesPage(server, page, extra));
  if (load.warmupS > 0) {
    for (const server of servers) await measureSlice(server, page, load.connections, load.warmupS, extra);
  }
  const slices = new Map<Server, Slice[]>(servers.map((s) => [s, []]));
  const sliceS = Math.max(1, Math.round(load.durationS / load.rounds));
  for (let round = 0; round < load.rounds; round++) {
    for (let i = 0; i < servers.length; i++) {
      const server = servers[(i + round) % servers.length]!;
      slices.get(server)!.push(await measureSlice(server, page, load.connections, sliceS, extra));
    }
  }
  return servers.map((server) => {
    const ss = slices.get(server)!;
    const requests = sum(ss.map((s) => s.wrk.requests));
    const cpuS = sum(ss.map((s) => s.cpuS));
    const wallS = sum(ss.map((s) => s.wallS));
    return {
      name: server.name,
      rps: requests / sum(ss.map((s) => s.wrk.durationS)),
      roundRps: ss.map((s) => s.wrk.rps),
      roundCpuUsPerReq: ss.map((s) => (s.cpuS * 1e6) / s.wrk.requests),
      p50Ms: med(ss.map((s) => s.wrk.latencyMs.p50)),
      p99Ms: med(ss.map((s) => s.wrk.latencyMs.p99)),
      requests,
      cpuPct: (100 * cpuS) / wallS,
      cpuUsPerReq: (cpuS * 1e6) / requests,
      capacityRps: requests / cpuS,
      loadCorePct: med(ss.map((s) => s.busy[LOAD_CPU] ?? NaN)),
      serverCorePct: med(ss.map((s) => s.busy[SERVER_CPU] ?? NaN)),
      errors: sum(ss.map((s) => s.wrk.socketErrors + s.wrk.non2xx)),
      sameBytes: first.get(server)!.body.equals(page.body),
    };
  });
}
