/**
 * The processes a bench scenario talks to, all started from the BUILT code (dist/) or the
 * Debian binaries: the emulator (upstream, on the load core), tm-cache and the bare baseline
 * (on the server core), a private redis-server, and the bench-only Redis-hit server.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { get as httpGet } from 'node:http';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { freePort, startProcess, waitForHttp, type Proc } from './procs.js';

export const ROOT = resolve(import.meta.dirname, '../..');
const CLI = join(ROOT, 'dist/cli.js');
export const LOAD_CPU = 0;
export const SERVER_CPU = 1;

export interface Server {
  readonly name: string;
  readonly url: string;
  readonly proc: Proc;
  /** tm-cache's management port (/metrics, /readyz); undefined for other servers. */
  readonly managementUrl?: string;
  /** The settings file a tm-cache was started with (`--config`): a SIGHUP reads it again. */
  readonly configFile?: string;
}

import type { Faults } from '../../src/emulator/faults.js';
import type { TokenInfo } from '../../src/emulator/state.js';
import type { StatsSnapshot } from '../../src/emulator/stats.js';

export type { TokenInfo };

export interface Emulator extends Server {
  readonly tokens: TokenInfo[];
  stats(): Promise<StatsSnapshot>;
  resetStats(): Promise<void>;
  /** POST /__emulator/mutations (src/emulator/mutations.ts): a change upstream, as the real instance would make it. */
  mutate(body: Record<string, unknown>): Promise<any>;
  /** A new token for each user (`issue_token`), with the user's projects. */
  issueTokens(userIds: readonly number[]): Promise<TokenInfo[]>;
  /** PUT /__emulator/faults (src/emulator/faults.ts): replaces the injected faults, e.g. `{ latency_ms: 400 }`; `{}` clears them. */
  faults(faults: Faults): Promise<void>;
}

/** The emulator (seed 42) on the load core; `medium` unless a scenario needs more users (`large`: 600). */
export async function startEmulator(scale: 'small' | 'medium' | 'large' = 'medium'): Promise<Emulator> {
  const port = await freePort();
  const proc = startProcess(`emulator (${scale})`, process.execPath, [CLI, 'emulator', '--port', String(port), '--scale', scale, '--seed', '42'], {
    cpu: LOAD_CPU,
  });
  const url = `http://127.0.0.1:${port}`;
  await waitForHttp(`${url}/__emulator/tokens`, proc, { timeoutMs: 90_000 });
  const control = async (method: string, path: string, body?: unknown): Promise<any> => {
    const init = body === undefined ? { method } : { method, body: JSON.stringify(body), headers: { 'content-type': 'application/json' } };
    const res = await fetch(`${url}/__emulator${path}`, init);
    if (res.status !== 200) throw new Error(`emulator ${method} ${path} → ${res.status}: ${await res.text()}`);
    return res.json();
  };
  const mutate = (body: Record<string, unknown>) => control('POST', '/mutations', body);
  return {
    name: 'emulator',
    url,
    proc,
    tokens: (await control('GET', '/tokens')) as TokenInfo[],
    stats: () => control('GET', '/stats'),
    resetStats: async () => void (await control('POST', '/stats/reset')),
    faults: async (faults) => void (await control('PUT', '/faults', faults)),
    mutate,
    issueTokens: async (userIds) => {
      const out: TokenInfo[] = [];
      for (const user_id of userIds) out.push((await mutate({ op: 'issue_token', user_id })) as TokenInfo);
      return out;
    },
  };
}

/** A tm-cache config file (JSON is YAML) under `dir`, for `TM_CACHE_CONFIG`. */
export function writeConfig(dir: string, name: string, config: Record<string, unknown>): string {
  const file = join(dir, `${name}.yaml`);
  writeFileSync(file, `${JSON.stringify(config, null, 2)}\n`);
  return file;
}

const BENCH_HMAC_SECRET = randomBytes(32).toString('hex');

export interface TmCacheOptions {
  readonly name?: string;
  readonly redisUrl?: string;
  readonly env?: Record<string, string>;
  /** Flags for node itself, e.g. `['--cpu-prof', '--cpu-prof-dir', dir]` (profile.ts). */
  readonly nodeArgs?: readonly string[];
  /** Another build's `dist/cli.js` (ab.ts); default this checkout's. */
  readonly cli?: string;
  /** tm-cache's --log-level; default the bench's (setLogLevel). */
  readonly logLevel?: string;
  /**
   * Settings over the defaults (a --config file). This checkout's build gets BENCH_BUDGET unless
   * they say otherwise: the scenarios measure the cache, not the learned budget's cautious start
   * (the fleet-* scenarios set their own budget, none included; first-minute runs at the defaults).
   * Each scenario says which in its output (scenarios.ts `budget`). Another build (`cli`) gets it
   * too, so that an A/B of misses compares builds at one budget (at its own defaults, the base's
   * learned start throttled one-at-a-time misses: three times the latency, 15 % more CPU); a build
   * older than the setting, which refuses it, starts at its defaults and its output says so.
   */
  readonly config?: Record<string, unknown>;
}

/** `over` on top of `under`, section by section (a settings file over the defaults, as tm-cache merges them). */
function mergeSettings(under: Record<string, unknown>, over: Record<string, unknown> | null): Record<string, unknown> {
  const merged: Record<string, unknown> = { ...under };
  for (const [name, value] of Object.entries(over ?? {})) {
    const below = merged[name];
    const bothSections =
      typeof value === 'object' && value !== null && !Array.isArray(value) && typeof below === 'object' && below !== null && !Array.isArray(below);
    merged[name] = bothSections ? mergeSettings(below as Record<string, unknown>, value as Record<string, unknown>) : value;
  }
  return merged;
}

/** A budget no scenario reaches (requests per second): the bench's default for this checkout. */
export const BENCH_BUDGET = { upstream: { budget: { requestsPerSecond: 100_000 } } };
let configDir: string | undefined;
let configCount = 0;

let defaultLogLevel = 'warn';

/** The log level of every tm-cache the bench starts (`--log-level`); warn unless set. */
export function setLogLevel(level: string): void {
  defaultLogLevel = level;
}

/**
 * The bench's budget beneath the scenario's own settings file (`TM_CACHE_CONFIG` in `env`): passed
 * as --config alone, the budget would replace that file (a flag wins over TM_CACHE_CONFIG), so the
 * two are made one file and the variable is dropped. Any build the bench starts, this checkout's
 * or a `--base`'s, gets both.
 */
function budgetBeneath(env: Record<string, string> | undefined): { config: Record<string, unknown>; env: Record<string, string> | undefined } {
  const file = env?.['TM_CACHE_CONFIG'];
  if (file === undefined) return { config: BENCH_BUDGET, env };
  const config = mergeSettings(BENCH_BUDGET, parseYaml(readFileSync(file, 'utf8')) as Record<string, unknown>);
  return { config, env: Object.fromEntries(Object.entries(env!).filter(([name]) => name !== 'TM_CACHE_CONFIG')) };
}

/**
 * `node dist/cli.js serve`, ready when its management port says so. Log level warn (no access
 * log), or the bench's `--log-level` (e.g. info: the default, one access line per request).
 */
export async function startTmCache(upstream: string, options: TmCacheOptions = {}): Promise<Server> {
  if (options.cli === undefined || options.config !== undefined) return startTmCacheWith(upstream, options);
  try {
    return await startTmCacheWith(upstream, { ...options, ...budgetBeneath(options.env) });
  } catch {
    console.log(`   ${options.name ?? options.cli}: refused the bench's budget (a build older than upstream.budget); started at its own defaults`);
    return startTmCacheWith(upstream, options);
  }
}

async function startTmCacheWith(upstream: string, options: TmCacheOptions): Promise<Server> {
  const [port, management] = [await freePort(), await freePort()];
  const args = [
    ...(options.nodeArgs ?? []),
    options.cli ?? CLI,
    'serve',
    '--upstream',
    upstream,
    '--port',
    String(port),
    '--management-port',
    String(management),
    '--log-level',
    options.logLevel ?? defaultLogLevel,
  ];
  if (options.redisUrl) args.push('--redis', options.redisUrl);
  let config = options.config;
  let env = options.env;
  if (config === undefined && options.cli === undefined) ({ config, env } = budgetBeneath(env));
  let configFile: string | undefined;
  if (config !== undefined) {
    configDir ??= mkdtempSync(join(tmpdir(), 'tm-cache-bench-config-'));
    configFile = writeConfig(configDir, `tm-cache-${++configCount}`, config);
    args.push('--config', configFile);
  }
  // A shared Redis needs a secret Redis does not hold; the replicas of one bench share this one.
  const secret = options.redisUrl ? { TM_CACHE_HMAC_SECRET: BENCH_HMAC_SECRET } : {};
  const proc = startProcess(options.name ?? 'tm-cache', process.execPath, args, { cpu: SERVER_CPU, env: { ...process.env, ...secret, ...env } });
  const managementUrl = `http://127.0.0.1:${management}`;
  await waitForHttp(`${managementUrl}/readyz`, proc);
  return { name: options.name ?? 'tm-cache', url: `http://127.0.0.1:${port}`, proc, managementUrl, configFile };
}

/** The sum of a metric's samples (all label sets) on a tm-cache's /metrics; 0 when absent. */
export async function metricSum(server: Server, name: string, labels = ''): Promise<number> {
  if (!server.managementUrl) return NaN;
  const text = await (await fetch(`${server.managementUrl}/metrics`)).text();
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name) || (line[name.length] !== ' ' && line[name.length] !== '{')) continue;
    if (labels && !line.includes(labels)) continue;
    sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

/** A TS script of test/bench run by node with tsx's loader (the hot path is plain JS either way). */
async function startBenchScript(name: string, script: string, args: string[], probePath: string, nodeArgs: readonly string[] = []): Promise<Server> {
  const port = await freePort();
  const proc = startProcess(name, process.execPath, [...nodeArgs, '--import', 'tsx', join(ROOT, 'test/bench', script), '--port', String(port), ...args], {
    cpu: SERVER_CPU,
    cwd: ROOT,
  });
  const url = `http://127.0.0.1:${port}`;
  await waitForHttp(`${url}${probePath}`, proc);
  return { name, url, proc };
}

/** bare-proxy.ts on the server core: node's own floor for a proxied answer (a miss). */
export function startBareProxy(upstream: string): Promise<Server> {
  return startBenchScript('bare node proxy', 'bare-proxy.ts', ['--upstream', upstream], '/__emulator/tokens');
}

export async function startBare(dir: string, body: Buffer, contentType: string, nodeArgs: readonly string[] = []): Promise<Server> {
  const file = join(dir, 'page.body');
  writeFileSync(file, body);
  return startBenchScript('bare fastify', 'bare-server.ts', ['--body', file, '--content-type', contentType], '/', nodeArgs);
}

/** What a server answered to one request, as it sent it: status, raw header list, body bytes (not decoded). */
export interface RawAnswer {
  readonly status: number;
  readonly headers: string[];
  readonly body: Buffer;
}

/** Headers node's http server writes itself: left out of an answer the floor server replays. */
const NODE_OWN_HEADERS = new Set(['date', 'connection', 'keep-alive', 'transfer-encoding']);

/** One GET of `url` with `headers`, the answer as it came (raw header list, body bytes not decoded). */
export function rawAnswer(url: string, headers: Record<string, string>): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    httpGet(url, { headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('error', reject);
      res.on('end', () => {
        const raw = res.rawHeaders;
        const kept: string[] = [];
        for (let i = 0; i < raw.length; i += 2) if (!NODE_OWN_HEADERS.has(raw[i]!.toLowerCase())) kept.push(raw[i]!, raw[i + 1]!);
        resolve({ status: res.statusCode!, headers: kept, body: Buffer.concat(chunks) });
      });
    }).on('error', reject);
  });
}

/**
 * The node:http floor (floor-server.ts): tm-cache's own answers to the page, for identity and gzip
 * clients, replayed from fixed Buffers by a bare `node:http` server.
 */
export async function startFloor(
  dir: string,
  answers: Record<'identity' | 'gzip', RawAnswer>,
  nodeArgs: readonly string[] = [],
  /** Busy work per request (floor-server.ts --spin-us): what a few µs of JavaScript cost, all told. */
  spinUs = 0,
): Promise<Server> {
  const spec: Record<string, { status: number; headers: string[]; body: string }> = {};
  for (const [kind, a] of Object.entries(answers)) {
    const body = join(dir, `floor-${kind}.body`);
    writeFileSync(body, a.body);
    spec[kind] = { status: a.status, headers: a.headers, body };
  }
  const file = join(dir, 'floor-answers.json');
  writeFileSync(file, JSON.stringify(spec));
  const spin = spinUs > 0 ? ['--spin-us', String(spinUs)] : [];
  return startBenchScript(spinUs > 0 ? `node:http floor + ${spinUs} µs` : 'node:http floor', 'floor-server.ts', ['--answers', file, ...spin], '/', nodeArgs);
}

/**
 * `tm-cache serve` whose memory tier stores nothing (`cache.memory.maxEntryBytes: 1`, less than
 * any entry's overhead), so that every request after the first is a Redis-tier hit. The Redis
 * tier has its own `cache.redis.maxEntryBytes`, so it still stores the page.
 */
export async function startRedisHitServer(
  upstream: string,
  redisUrl: string,
  prefix: string,
  encrypted: boolean,
  options: Pick<TmCacheOptions, 'name' | 'cli' | 'nodeArgs'> = {},
): Promise<Server> {
  const dir = mkdtempSync(join(tmpdir(), 'tm-cache-bench-'));
  const config = join(dir, 'redis-hit.yaml');
  writeFileSync(config, `cache:\n  memory:\n    maxEntryBytes: 1\n  redis:\n    keyPrefix: ${JSON.stringify(prefix)}\n`);
  const keys: Record<string, string> = encrypted
    ? { TM_CACHE_REDIS_ENCRYPTION_KEYS: `bench:${randomBytes(32).toString('hex')}`, TM_CACHE_REDIS_ENCRYPTION_KEY_ID: 'bench' }
    : {};
  const name = options.name ?? (encrypted ? 'tm-cache redis-hit (encrypted)' : 'tm-cache redis-hit');
  return startTmCache(upstream, { ...options, name, redisUrl, env: { TM_CACHE_CONFIG: config, ...keys } });
}

export interface Redis {
  readonly url: string;
  readonly port: number;
  readonly proc: Proc;
}

/** A private redis-server on a free port (never the shared 6379), nothing persisted. */
export async function startRedis(): Promise<Redis> {
  const port = await freePort();
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--loglevel', 'warning'];
  const proc = startProcess('redis-server', 'redis-server', args, { cpu: LOAD_CPU });
  const deadline = Date.now() + 10_000;
  for (;;) {
    const ok = await new Promise<boolean>((done) => {
      const socket = createConnection({ host: '127.0.0.1', port });
      const end = (v: boolean) => {
        socket.destroy();
        done(v);
      };
      socket.setTimeout(500, () => end(false));
      socket.once('error', () => end(false));
      socket.once('connect', () => socket.write('PING\r\n'));
      socket.once('data', (d) => end(d.toString().startsWith('+PONG')));
    });
    if (ok) break;
    if (proc.hasExited() || Date.now() > deadline) throw new Error(`redis-server did not start on ${port}:\n${proc.tail()}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  return { url: `redis://127.0.0.1:${port}`, port, proc };
}
