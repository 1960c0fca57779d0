/**
 * Tracing through the standard OTEL_* environment, as the image runs it (`node dist/cli.js serve`)
 * with Redis, against a real OTLP/HTTP receiver (otlp-receiver.ts: the JSON the exporter puts on
 * the wire). Between tm-cache and the emulator sits a spy that records the `traceparent` each
 * upstream request carried, and can hold an answer back (to make requests coalesce).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestEmulator, type TestEmulator } from '../helpers/emulator.js';
import { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from '../helpers/otlp-receiver.js';
import { startRedis, type RedisHandle } from '../helpers/redis.js';
import { serving, spawnServe, type Serving } from '../helpers/serve.js';
import { until } from '../helpers/wait.js';

const SERVER = 2;
const CLIENT = 3;

interface UpstreamSpy {
  readonly url: string;
  /** The traceparent each upstream request carried, by path (with its query), in order. */
  readonly traceparents: Map<string, (string | undefined)[]>;
  /** Questions whose answer is held back this long (ms), by their `page` parameter. */
  readonly slow: Map<string, number>;
  close(): Promise<void>;
}

/** A pass-through to the emulator that records what tm-cache sent it. */
async function startSpy(upstream: string): Promise<UpstreamSpy> {
  const traceparents = new Map<string, (string | undefined)[]>();
  const slow = new Map<string, number>();
  const server: Server = createServer((req, res) => {
    const path = req.url ?? '/';
    traceparents.set(path, [...(traceparents.get(path) ?? []), req.headers['traceparent'] as string | undefined]);
    const { host: _host, ...headers } = req.headers;
    void (async () => {
      await sleep(slow.get(new URL(path, 'http://x').searchParams.get('page') ?? '') ?? 0);
      const answer = await request(`${upstream}${path}`, { method: 'GET', headers });
      const body = Buffer.from(await answer.body.arrayBuffer());
      res.writeHead(answer.statusCode, answer.headers as Record<string, string>).end(body);
    })().catch(() => res.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    traceparents,
    slow,
    close: async () => {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

let emulator: TestEmulator;
let spy: UpstreamSpy;
let redis: RedisHandle;
let receiver: OtlpReceiver;
let serve: Serving;
const started: Serving[] = [];

function serveEnv(extra: Record<string, string>): Record<string, string> {
  return {
    TM_CACHE_UPSTREAM: spy.url,
    TM_CACHE_PORT: '0',
    TM_CACHE_MANAGEMENT_PORT: '0',
    TM_CACHE_REDIS: redis.url,
    // Generous: on a loaded machine a slow command must not spend the request's Redis allowance (and skip the entry's write).
    TM_CACHE_REDIS_COMMAND_TIMEOUT_MS: '2000',
    TM_CACHE_HMAC_SECRET: 'ab'.repeat(32),
    TM_CACHE_LOG_ACCESS: 'off',
    ...extra,
  };
}

async function startTraced(extra: Record<string, string>): Promise<Serving> {
  const s = await serving(spawnServe(serveEnv(extra)));
  started.push(s);
  return s;
}

/** SIGTERM, and the exit: the drain's last step exports what is buffered. */
async function stop(s: Serving): Promise<void> {
  if (s.child.exitCode !== null) return;
  const exited = new Promise((resolve) => s.child.once('exit', resolve));
  s.child.kill('SIGTERM');
  await exited;
}

beforeAll(async () => {
  [emulator, redis, receiver] = await Promise.all([startTestEmulator(), startRedis(), startOtlpReceiver()]);
  spy = await startSpy(emulator.url);
  serve = await startTraced({ OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_SERVICE_NAME: 'tm-cache-under-test', OTEL_BSP_SCHEDULE_DELAY: '50' });
}, 60_000);

afterAll(async () => {
  for (const s of started) s.child.kill('SIGKILL');
  await Promise.all([spy?.close(), receiver?.close(), emulator?.close(), redis?.stop()]);
});

/** The traceparents the upstream got for `path` (tm-cache asks its canonical form: matched by path and page). */
function upstreamGot(path: string): (string | undefined)[] | undefined {
  const asked = new URL(path, 'http://x');
  const matching = [...spy.traceparents].filter(([p]) => {
    const u = new URL(p, 'http://x');
    return u.pathname === asked.pathname && u.searchParams.get('page') === asked.searchParams.get('page');
  });
  return matching.length === 0 ? undefined : matching.flatMap(([, got]) => got);
}

// From 2: page 1 is the default, which the canonical question the upstream gets leaves out.
let page = 1;
/** A question nobody asked yet. */
function freshPath(projectId: number): string {
  page += 1;
  return `/api/v1/projects/${projectId}/runs?per_page=15&page=${page}`;
}

function randomHex(bytes: number): string {
  return Buffer.from(Array.from({ length: bytes }, () => Math.floor(Math.random() * 256))).toString('hex');
}

/** A client's own trace: a fresh trace id and parent span id, sampled. */
function clientTrace(): { traceId: string; parentId: string; header: string } {
  const [traceId, parentId] = [randomHex(16), randomHex(8)];
  return { traceId, parentId, header: `00-${traceId}-${parentId}-01` };
}

async function get(url: string, path: string, token: string, traceparent?: string): Promise<{ status: number; cacheStatus: string }> {
  const res = await request(`${url}${path}`, { headers: { authorization: `Bearer ${token}`, ...(traceparent ? { traceparent } : {}) } });
  await res.body.dump();
  return { status: res.statusCode, cacheStatus: String(res.headers['cache-status']) };
}

/** The trace's spans once its server spans (`servers` of them) have arrived. */
async function traceOf(traceId: string, servers = 1): Promise<ReceivedSpan[]> {
  const spans = (): ReceivedSpan[] => receiver.spans.filter((s) => s.traceId === traceId);
  await until(() => spans().filter((s) => s.kind === SERVER).length >= servers, 10_000).catch(() =>
    expect.fail(`trace ${traceId}: ${spans().length} spans received, ${servers} server span(s) expected`),
  );
  // Children end before their request's span: they are in the same batch or an earlier one.
  return spans();
}

function one(spans: readonly ReceivedSpan[], predicate: (s: ReceivedSpan) => boolean, what: string): ReceivedSpan {
  const found = spans.filter(predicate);
  expect(found, what).toHaveLength(1);
  return found[0]!;
}

describe('tracing on (OTEL_EXPORTER_OTLP_ENDPOINT)', () => {
  it("a miss: a server span under the client's traceparent with the outcome, and children for the identity, the budget token, the upstream request and Redis", async () => {
    const m = emulator.tokens.member(0);
    const path = freshPath(m.project_ids[0]!);
    const client = clientTrace();
    const answer = await get(serve.url, path, m.token, client.header);
    expect(answer.status).toBe(200);
    expect(answer.cacheStatus).toMatch(/^tm-cache; fwd=uri-miss;/);
    // The entry's write to Redis may end after the answer (and its span) went out.
    await until(() => receiver.spans.some((s) => s.traceId === client.traceId && s.attributes['db.operation.name'] === 'set'));
    const spans = await traceOf(client.traceId);

    const server = one(spans, (s) => s.kind === SERVER, 'one server span');
    expect(server.parentSpanId).toBe(client.parentId);
    expect(server.name).toBe('GET /api/v1/projects/{project_id}/runs');
    expect(server.resource['service.name']).toBe('tm-cache-under-test');
    expect(server.attributes).toMatchObject({
      'http.request.method': 'GET',
      'http.route': '/api/v1/projects/{project_id}/runs',
      'http.response.status_code': 200,
      'url.path': `/api/v1/projects/${m.project_ids[0]}/runs`,
      'tm_cache.outcome': 'miss',
      'tm_cache.operation': 'listRuns',
      'tm_cache.user_id': m.user_id,
    });
    expect(server.attributes['tm_cache.scope']).toMatch(/^(user|project)$/);

    const identity = one(spans, (s) => s.name === 'identity', 'one identity span');
    expect(identity.parentSpanId).toBe(server.spanId);
    expect(identity.attributes).toMatchObject({ 'tm_cache.identity': 'caller', 'tm_cache.identity_via': 'upstream' });
    const fill = one(spans, (s) => s.name === 'cache fill', 'one fill span');
    expect(fill.parentSpanId).toBe(server.spanId);
    expect(fill.attributes['tm_cache.fill.stored']).toBe(true);

    // Two upstream requests: GET /user under the identity look-up, the question under the fill.
    const upstream = spans.filter((s) => s.kind === CLIENT && s.name === 'GET');
    expect(upstream.map((s) => s.attributes['url.path']).sort()).toEqual([`/api/v1/projects/${m.project_ids[0]}/runs`, '/api/v1/user']);
    const question = one(upstream, (s) => s.attributes['url.path'] !== '/api/v1/user', 'the fill upstream');
    expect(question.parentSpanId).toBe(fill.spanId);
    expect(question.attributes['http.response.status_code']).toBe(200);
    expect(one(upstream, (s) => s.attributes['url.path'] === '/api/v1/user', 'the look-up upstream').parentSpanId).toBe(identity.spanId);
    // Each waited for (or took at once) a token of the fleet's budget first.
    const tokens = spans.filter((s) => s.name === 'upstream budget token');
    expect(tokens.map((s) => s.parentSpanId).sort()).toEqual([fill.spanId, identity.spanId].sort());
    expect(tokens.every((s) => s.attributes['tm_cache.budget.priority'] !== undefined)).toBe(true);

    // The upstream was told the fill's place in the trace: the client's trace, the upstream span's id.
    expect(upstreamGot(path)).toEqual([`00-${client.traceId}-${question.spanId}-01`]);

    // Redis round trips of this request: at least the tier's read and the entry's write.
    const redisSpans = spans.filter((s) => s.attributes['db.system.name'] === 'redis');
    const redisOps = new Set(redisSpans.map((s) => s.attributes['db.operation.name']));
    expect(redisOps).toContain('get');
    expect(redisOps).toContain('set');
    const ids = new Set(spans.map((s) => s.spanId));
    expect(redisSpans.every((s) => ids.has(s.parentSpanId))).toBe(true);
  });

  it('a hit: its span says hit and from which tier, and nothing went upstream or to Redis', async () => {
    const m = emulator.tokens.member(1);
    const path = freshPath(m.project_ids[0]!);
    expect((await get(serve.url, path, m.token)).status).toBe(200);
    const client = clientTrace();
    const answer = await get(serve.url, path, m.token, client.header);
    expect(answer.cacheStatus).toMatch(/^tm-cache; hit; .*detail=memory/);
    const spans = await traceOf(client.traceId);
    expect(spans).toHaveLength(1);
    expect(spans[0]!.parentSpanId).toBe(client.parentId);
    expect(spans[0]!.attributes).toMatchObject({ 'tm_cache.outcome': 'hit', 'tm_cache.tier': 'memory' });
  });

  it('a coalesced fill links the requests that waited on it', async () => {
    const m = emulator.tokens.member(0);
    const path = freshPath(m.project_ids[0]!);
    spy.slow.set(String(page), 400);
    const clients = [clientTrace(), clientTrace(), clientTrace()];
    const [leader, ...waiters] = clients;
    const first = get(serve.url, path, m.token, leader!.header);
    // The others arrive while the leader's fill waits on the upstream.
    await until(() => (upstreamGot(path)?.length ?? 0) === 1);
    const answers = await Promise.all([first, ...waiters.map((c) => get(serve.url, path, m.token, c.header))]);
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200]);
    expect(upstreamGot(path)).toHaveLength(1);

    const fill = one(await traceOf(leader!.traceId), (s) => s.name === 'cache fill', "the leader's fill");
    const waiting = await Promise.all(waiters.map(async (c) => one(await traceOf(c.traceId), (s) => s.kind === SERVER, 'a waiter')));
    for (const w of waiting) expect(w.attributes['tm_cache.outcome']).toBe('coalesced');
    expect(fill.links.map((l) => `${l.traceId}/${l.spanId}`).sort()).toEqual(waiting.map((w) => `${w.traceId}/${w.spanId}`).sort());
  });

  it('no span attribute, and nothing sent to the receiver, carries a credential or a query', () => {
    const sent = receiver.bodies.join('\n');
    for (const t of emulator.tokens.all) expect(sent).not.toContain(t.token);
    expect(sent).not.toContain('per_page=');
  });
});

describe('tracing and the drain', () => {
  it('SIGTERM exports the spans still batched before the process exits', async () => {
    const own = await startOtlpReceiver();
    try {
      // A batch that would wait ten minutes: only the drain sends it.
      const s = await startTraced({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${own.url}/v1/traces`, OTEL_BSP_SCHEDULE_DELAY: '600000' });
      const m = emulator.tokens.member(2);
      const client = clientTrace();
      await get(s.url, freshPath(m.project_ids[0]!), m.token, client.header);
      expect(own.posts).toBe(0);
      await stop(s);
      expect(own.spans.filter((x) => x.traceId === client.traceId && x.kind === SERVER)).toHaveLength(1);
    } finally {
      await own.close();
    }
  });

  it('a collector that is down costs the spans, never a request nor the drain', async () => {
    const gone = await startOtlpReceiver();
    await gone.close();
    // Batches of 100 go as they fill (and fail); what is left waits for the drain, which fails too.
    const s = await startTraced({
      OTEL_EXPORTER_OTLP_ENDPOINT: gone.url,
      OTEL_EXPORTER_OTLP_TIMEOUT: '1000',
      OTEL_BSP_SCHEDULE_DELAY: '600000',
      OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '100',
    });
    const m = emulator.tokens.member(1);
    const path = freshPath(m.project_ids[0]!);
    expect((await get(s.url, path, m.token)).status).toBe(200);
    const hits = await Promise.all(Array.from({ length: 150 }, () => get(s.url, path, m.token)));
    expect(hits.every((h) => h.status === 200 && h.cacheStatus.startsWith('tm-cache; hit;'))).toBe(true);
    await sleep(200);
    expect((await get(s.url, path, m.token)).status).toBe(200);
    const exited = new Promise<number | null>((resolve) => s.child.once('exit', (code) => resolve(code)));
    s.child.kill('SIGTERM');
    expect(await exited).toBe(0);
    expect(s.output()).toContain('tracing: the last spans were not exported');
  });

  it('OTEL_SDK_DISABLED=true: nothing is sent, and the upstream gets no traceparent', async () => {
    const own = await startOtlpReceiver();
    try {
      const s = await startTraced({ OTEL_EXPORTER_OTLP_ENDPOINT: own.url, OTEL_SDK_DISABLED: 'true', OTEL_BSP_SCHEDULE_DELAY: '50' });
      const m = emulator.tokens.member(2);
      const path = freshPath(m.project_ids[0]!);
      expect((await get(s.url, path, m.token, clientTrace().header)).status).toBe(200);
      await stop(s);
      expect(upstreamGot(path)).toEqual([undefined]);
      expect(own.posts).toBe(0);
      expect(s.output()).not.toContain('tracing on');
    } finally {
      await own.close();
    }
  });
});
