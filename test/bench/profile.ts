/**
 * `profile:<mode>`: where a tm-cache request path spends its CPU. Runs the BUILT server under
 * `node --cpu-prof` (pinned to the server core, load on the load core, as every scenario), then
 * prints the top frames by self time and by inclusive time, a breakdown by origin (tm-cache,
 * fastify, node, GC), and the garbage collector's share of the busy time.
 *
 *   npm run bench -- profile:hit      # memory-tier hits, wrk 32 connections
 *   npm run bench -- profile:redis    # Redis-tier hits (a memory tier storing nothing: startRedisHitServer)
 *   npm run bench -- profile:miss     # distinct cold requests, one at a time
 *   npm run bench -- profile:bare     # the bare fastify baseline, for comparison
 *   npm run bench -- profile:floor    # the node:http floor (tm-cache's answer replayed), for comparison
 *
 * Knobs: --duration (seconds of load, 10), --top (25), --accept-encoding (e.g. gzip, for the
 * load's clients), --profile-out (keep the .cpuprofile there, e.g. to open it in Chrome
 * DevTools). Bounded in time; every child is killed on exit.
 */
import { copyFileSync, mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Pool } from 'undici';
import { fetchPage, type Page } from './measure.js';
import type { Check } from './report.js';
import { uniquePath } from './scenario-miss.js';
import { rawAnswer, ROOT, startBare, startFloor, startRedis, startRedisHitServer, startTmCache, type Emulator, type Server } from './servers.js';
import { runWrk } from './wrk.js';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

/** Frames of module loading (node's loaders, tsx): start-up, not the request path. */
const STARTUP_FRAME = /^node:internal\/modules\/|\/tsx\//;

export const PROFILE_MODES = ['hit', 'redis', 'miss', 'bare', 'floor'] as const;
type ProfileMode = (typeof PROFILE_MODES)[number];

interface ProfileOptions {
  readonly durationS: number;
  readonly top: number;
  readonly acceptEncoding?: string | undefined;
  /** Keep the .cpuprofile at this path. */
  readonly out?: string | undefined;
}

/** Shares are of the busy time (0..1). */
interface ProfileFigures {
  readonly mode: ProfileMode;
  readonly load: string;
  readonly busyS: number;
  readonly sampledS: number;
  readonly startupS: number;
  readonly gcShare: number;
  readonly byOrigin: [string, number][];
  readonly topSelf: [string, number][];
  readonly topInclusive: [string, number][];
  readonly checks: Check[];
}

function frameName(n: ProfileNode): string {
  const f = n.callFrame;
  const url = f.url.replace(`file://${ROOT}/`, '').replace(/^file:\/\/.*node_modules\//, '');
  return `${f.functionName || '(anonymous)'} ${url ? `${url}:${f.lineNumber + 1}` : ''}`.trim();
}

function origin(n: ProfileNode): string {
  const { url, functionName } = n.callFrame;
  if (!url) return functionName.startsWith('(') ? functionName : '(native/builtin)';
  // A package first: its files may sit under a dist/ of its own (lru-cache's dist/esm/).
  const m = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (m) return m[1]!;
  if (url.includes('/dist/')) return `tm-cache ${url.slice(url.indexOf('/dist/') + 6)}`;
  if (url.startsWith('node:')) return url;
  return url;
}

type Analysis = Omit<ProfileFigures, 'mode' | 'load' | 'checks'>;

/**
 * `skipUs`: samples of the first µs of the profile (start-up, module loading) are left out.
 * `requests`: how many the load made, for the figures per request (µs of busy time each).
 */
function analyse(profile: CpuProfile, skipUs: number, topN: number, requests: number): Analysis {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const selfUs = new Map<number, number>();
  let atUs = 0;
  profile.samples.forEach((id, i) => {
    atUs += profile.timeDeltas[i] ?? 0;
    if (atUs >= skipUs) selfUs.set(id, (selfUs.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0));
  });
  // Loading modules at start-up is not the request path: left out of every figure below.
  const isStartup = (id: number): boolean => {
    for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) if (STARTUP_FRAME.test(byId.get(cur)!.callFrame.url)) return true;
    return false;
  };
  let startup = 0;
  for (const [id, us] of selfUs) {
    if (!isStartup(id)) continue;
    startup += us;
    selfUs.delete(id);
  }
  const total = [...selfUs.values()].reduce((a, b) => a + b, 0);
  const idle = [...selfUs].filter(([id]) => byId.get(id)!.callFrame.functionName === '(idle)').reduce((a, [, v]) => a + v, 0);
  const busy = total - idle;
  const pct = (us: number) => `${((100 * us) / busy).toFixed(1).padStart(5)}%  ${(us / requests).toFixed(2).padStart(6)} µs/req`;

  const selfByName = new Map<string, number>();
  const inclByName = new Map<string, number>();
  const byOrigin = new Map<string, number>();
  for (const [id, us] of selfUs) {
    const node = byId.get(id)!;
    if (node.callFrame.functionName === '(idle)') continue;
    selfByName.set(frameName(node), (selfByName.get(frameName(node)) ?? 0) + us);
    byOrigin.set(origin(node), (byOrigin.get(origin(node)) ?? 0) + us);
    // Inclusive: each distinct frame on the stack once (recursion counted once).
    const seen = new Set<string>();
    for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
      const name = frameName(byId.get(cur)!);
      if (seen.has(name)) continue;
      seen.add(name);
      inclByName.set(name, (inclByName.get(name) ?? 0) + us);
    }
  }
  const top = (m: Map<string, number>, n: number) => [...m].sort((a, b) => b[1] - a[1]).slice(0, n);
  console.log(
    `\n${requests} requests; busy ${(busy / requests).toFixed(1)} µs per request (under the profiler); busy ${(busy / 1e6).toFixed(2)} s of ${(total / 1e6).toFixed(2)} s sampled (percentages are of busy time; ${(startup / 1e6).toFixed(2)} s loading modules at start-up left out)`,
  );
  const gc = byOrigin.get('(garbage collector)') ?? 0;
  console.log(`GC share: ${pct(gc).trim()} (of busy time; (the "(garbage collector)" frame: V8's collector on the main thread)`);
  console.log('\n-- by origin (self time)');
  for (const [name, us] of top(byOrigin, 15)) console.log(`${pct(us)}  ${name}`);
  console.log('\n-- top frames, self time');
  for (const [name, us] of top(selfByName, topN)) console.log(`${pct(us)}  ${name}`);
  console.log('\n-- top frames, inclusive time (tm-cache, fastify, lru-cache, node:)');
  const interesting = new Map([...inclByName].filter(([name]) => /dist\/|fastify|lru-cache|node:|ioredis|undici|pino|prom-client/.test(name)));
  for (const [name, us] of top(interesting, topN)) console.log(`${pct(us)}  ${name}`);
  const shares = (xs: [string, number][]): [string, number][] => xs.map(([name, us]) => [name, us / busy]);
  return {
    busyS: busy / 1e6,
    sampledS: total / 1e6,
    startupS: startup / 1e6,
    gcShare: gc / busy,
    byOrigin: shares(top(byOrigin, 15)),
    topSelf: shares(top(selfByName, topN)),
    topInclusive: shares(top(interesting, topN)),
  };
}

async function missLoad(emulator: Emulator, server: Server, page: Page, seconds: number): Promise<[string, number]> {
  const pool = new Pool(server.url, { connections: 1 });
  const deadline = performance.now() + seconds * 1_000;
  let n = 0;
  try {
    while (performance.now() < deadline) {
      const res = await pool.request({ method: 'GET', path: uniquePath(page), headers: { authorization: `Bearer ${page.token}` } });
      await res.body.arrayBuffer();
      n++;
    }
  } finally {
    await pool.close();
  }
  const load = `${n} distinct misses in ${seconds} s (upstream: ${(await emulator.stats()).total} requests)`;
  console.log(load);
  return [load, n];
}

/** Profiles `mode` against `emulator` (medium, seed 42); the profile and its files go under `dir`. */
export async function runProfile(mode: ProfileMode, emulator: Emulator, dir: string, options: ProfileOptions): Promise<ProfileFigures> {
  const profiles = join(dir, `profile-${mode}`);
  mkdirSync(profiles, { recursive: true });
  const nodeArgs = ['--cpu-prof', '--cpu-prof-dir', profiles, '--cpu-prof-interval', '200'];
  const member = emulator.tokens.find((t) => !t.is_admin && t.project_ids.length > 0)!;
  const path = `/api/v1/projects/${member.project_ids[0]}/runs?expands=users`;
  const ref = await fetchPage(emulator.url + path, member.token);
  const page: Page = { path, token: member.token, body: ref.body, contentType: String(ref.headers['content-type']) };
  let server: Server;
  let spawnedAt = performance.now();
  if (mode === 'bare') {
    server = await startBare(profiles, page.body, page.contentType, nodeArgs);
  } else if (mode === 'floor') {
    // tm-cache's own answers, replayed by the node:http floor (floor-server.ts) under the profiler.
    const tm = await startTmCache(emulator.url);
    const auth = { authorization: `Bearer ${page.token}` };
    const answers = { identity: await rawAnswer(tm.url + path, auth), gzip: await rawAnswer(tm.url + path, { ...auth, 'accept-encoding': 'gzip' }) };
    await tm.proc.stop();
    spawnedAt = performance.now();
    server = await startFloor(profiles, answers, nodeArgs);
  } else if (mode === 'redis') {
    const redis = await startRedis();
    server = await startRedisHitServer(emulator.url, redis.url, 'tmcp:', false, { nodeArgs });
  } else {
    server = await startTmCache(emulator.url, { nodeArgs });
  }
  await fetchPage(server.url + path, page.token);
  await new Promise((r) => setTimeout(r, 200)); // let a fire-and-forget Redis write land
  // The profile starts with the process: what came before the load (start-up) is left out.
  const skipUs = (performance.now() - spawnedAt) * 1_000;
  let load: string;
  let requests: number;
  if (mode === 'miss') {
    [load, requests] = await missLoad(emulator, server, page, options.durationS);
  } else {
    const extra: Record<string, string> = options.acceptEncoding ? { 'accept-encoding': options.acceptEncoding } : {};
    const wrk = await runWrk({
      url: server.url + path,
      connections: 32,
      durationS: options.durationS,
      headers: { authorization: `Bearer ${page.token}`, ...extra },
    });
    load = `${mode}: ${wrk.rps.toFixed(0)} req/s under the profiler (sampling slows it down)`;
    requests = wrk.requests;
    console.log(load);
  }
  await server.proc.stop(10_000); // SIGTERM: a clean exit writes the profile
  // In bare mode the page body file is in the folder too: pick the profile.
  const file = readdirSync(profiles).find((f) => f.endsWith('.cpuprofile'));
  if (!file) throw new Error(`no .cpuprofile written in ${profiles}`);
  if (options.out) copyFileSync(join(profiles, file), options.out);
  console.log(`(the first ${(skipUs / 1e6).toFixed(1)} s of the profile, start-up until the load began, are left out)`);
  const analysis = analyse(JSON.parse(readFileSync(join(profiles, file), 'utf8')) as CpuProfile, skipUs, options.top, requests);
  return { mode, load, ...analysis, checks: [{ name: `profile:${mode}: GC share of busy time`, value: analysis.gcShare, target: 'info', pass: undefined }] };
}
