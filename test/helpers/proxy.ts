/**
 * Starts tm-cache the way `tm-cache serve` does (startProxy), on 127.0.0.1 port 0, in front of a
 * given upstream, with config overrides deep-merged over the defaults.
 */
import { pino } from 'pino';
import { request } from 'undici';
import { DEFAULT_CONFIG, type Config } from '../../src/config/schema.js';
import { startProxy, type RunningProxy } from '../../src/serve.js';

export type DeepPartial<T> = { -readonly [K in keyof T]?: T[K] extends object ? DeepPartial<T[K]> : T[K] };

/**
 * The identity HMAC secret of test replicas that share a Redis and say no secret of their own:
 * a shared Redis needs one (relations.ts), and replicas of one test must agree on it.
 */
const TEST_HMAC_SECRET = Buffer.alloc(32, 0x7e).toString('hex');

/**
 * The upstream budget of test replicas unless a test sets its own: generous, so that tests firing
 * bursts (fairness, coalescing, junk credentials) test what they test at their own pace rather than
 * the learned default's cautious start (5 req/s, climbing). The budget's own tests
 * (test/security/fleet-budget.test.ts) set `requestsPerSecond` themselves, 0 included.
 */
const TEST_BUDGET_RPS = 100_000;

/**
 * `TM_CACHE_SHARING=project npm test` runs the whole suite with sharing by project as every test
 * replica's default (`npm run test:project`); a test that sets `cache.sharing` keeps its own.
 */
const TEST_SHARING = process.env['TM_CACHE_SHARING'] === 'project' ? 'project' : 'user';

export function makeConfig(upstreamUrl: string, overrides: DeepPartial<Config> = {}): Config {
  const base = structuredClone(DEFAULT_CONFIG) as unknown as Record<string, unknown>;
  merge(base, {
    upstream: { url: upstreamUrl, budget: { requestsPerSecond: TEST_BUDGET_RPS } },
    server: { port: 0, managementPort: 0, shutdownGraceMs: 1_000 },
    cache: { sharing: TEST_SHARING },
  });
  merge(base, overrides as Record<string, unknown>);
  const config = base as unknown as Config;
  const secretGiven = config.identity.hmacSecret !== '' || Object.keys(config.cache.redis.encryptionKeys).length > 0;
  const usesRedis = config.cache.redis.url !== '' || config.cache.redis.mode !== 'standalone';
  if (usesRedis && !secretGiven) merge(base, { identity: { hmacSecret: TEST_HMAC_SECRET } });
  return config;
}

function merge(target: Record<string, unknown>, source: Record<string, unknown>): void {
  for (const [k, v] of Object.entries(source)) {
    const t = target[k];
    if (v !== null && typeof v === 'object' && !Array.isArray(v) && t !== null && typeof t === 'object' && !Array.isArray(t)) {
      merge(t as Record<string, unknown>, v as Record<string, unknown>);
    } else {
      target[k] = v;
    }
  }
}

export interface TestProxy extends RunningProxy {
  get(path: string, token?: string, headers?: Record<string, string>): Promise<TestResponse>;
}

export interface TestResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
  json(): any;
}

export async function startTestProxy(upstreamUrl: string, overrides: DeepPartial<Config> = {}, now?: () => number): Promise<TestProxy> {
  const config = makeConfig(upstreamUrl, overrides);
  const logger = pino({ level: process.env['TM_CACHE_TEST_LOG'] ?? 'silent' });
  const proxy = await startProxy(config, { logger, ...(now ? { now } : {}) });
  return {
    ...proxy,
    get: (path, token, headers = {}) => httpGet(proxy.url + path, token, headers),
  };
}

export async function httpGet(url: string, token?: string, headers: Record<string, string> = {}, method: 'GET' | 'HEAD' = 'GET'): Promise<TestResponse> {
  const res = await request(url, {
    method,
    headers: { ...(token === undefined ? {} : { authorization: `Bearer ${token}` }), ...headers },
  });
  const body = Buffer.from(await res.body.arrayBuffer());
  return { status: res.statusCode, headers: res.headers, body, json: () => JSON.parse(body.toString('utf8')) };
}
