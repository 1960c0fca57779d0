/**
 * Only the API is forwarded (hardening item 11): a request the cache does not answer reaches the
 * instance only under `upstream.forwardPrefixes` (`/api/` by default). Anything else, the
 * emulator's control plane included, is a JSON 404 from tm-cache naming the rule, and so is a
 * path that would leave the prefix once dot segments or encoded slashes are resolved.
 */
import { request } from 'undici';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startHostileUpstream, type HostileUpstream } from '../helpers/hostile.js';
import { httpGet, startTestProxy, type TestProxy } from '../helpers/proxy.js';
import { sendRaw, sendRawRequest } from '../helpers/raw-request.js';
import { proxyOverEmulator } from '../helpers/setup.js';

const env = proxyOverEmulator();

function expectRefusedByRule(res: { status: number; headers: Record<string, unknown>; text: string }, rule = '/api/'): void {
  expect(res.status).toBe(404);
  expect(res.headers['content-type']).toMatch(/^application\/json/);
  const body = JSON.parse(res.text) as { message: string; errors: object };
  expect(body.message).toContain(rule);
  expect(body.message).toContain('upstream.forwardPrefixes');
  expect(body.errors).toEqual({});
}

async function send(url: string, method = 'GET', body?: string) {
  const res = await request(url, { method, headers: { 'content-type': 'application/json' }, body });
  return { status: res.statusCode, headers: res.headers, text: await res.body.text() };
}

describe('by default, only /api/ is forwarded', () => {
  it("refuses the emulator's token list with a 404 naming the rule", async () => {
    const res = await send(`${env.proxy.url}/__emulator/tokens`);
    expectRefusedByRule(res);
    expect(res.text).not.toContain(env.emulator.tokens.admin().token);
  });

  it("never lets a write reach the emulator's fault control plane", async () => {
    const res = await send(`${env.proxy.url}/__emulator/faults`, 'PUT', JSON.stringify({ latency_ms: 5_000 }));
    expectRefusedByRule(res);
    expect((await httpGet(`${env.emulator.url}/__emulator/faults`)).json()).toEqual({});
  });

  it('still forwards the API itself', async () => {
    const { token } = env.emulator.tokens.member(0);
    const res = await env.proxy.get('/api/v1/projects/1/cases', token);
    expect(res.status).toBe((await httpGet(`${env.emulator.url}/api/v1/projects/1/cases`, token)).status);
    expect((await env.emulator.stats()).total).toBeGreaterThan(0);
  });
});

describe('a path that leaves the prefix once resolved', () => {
  let upstream: HostileUpstream;
  let proxy: TestProxy;
  beforeAll(async () => {
    upstream = await startHostileUpstream();
    proxy = await startTestProxy(upstream.url);
  });
  afterAll(async () => {
    await proxy?.close();
    await upstream?.close();
  });

  beforeEach(() => {
    upstream.seen.length = 0;
    upstream.answer = (_, res) => {
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"reached":true}');
      return true;
    };
  });

  it('is told apart from one that stays inside it, which is forwarded', async () => {
    const res = await sendRaw(proxy.url, '/api/v1/projects/1/cases?x=..');
    expect(res.status).toBe(200);
    expect(upstream.seen).toEqual(['POST /api/v1/projects/1/cases?x=..']);
  });

  it.each([
    '/api/../admin',
    '/api/./../admin',
    '/api/%2e%2e/admin',
    '/api/v1/%2E./%2e%2E/admin?x=1',
    '/api/..%2fadmin',
    '/api\\..\\admin',
    '/apiary',
    '/API/v1/projects/1/cases',
    'http://127.0.0.1/api/v1/projects/1/cases',
  ])('%s is refused here and never reaches the upstream', async (target) => {
    expectRefusedByRule(await sendRaw(proxy.url, target));
    expect(upstream.seen).toEqual([]);
  });
});

describe('upstream.forwardPrefixes', () => {
  let proxy: TestProxy;
  beforeAll(async () => {
    proxy = await startTestProxy(env.emulator.url, { upstream: { forwardPrefixes: ['/api/', '/__emulator/'] } });
  });
  afterAll(async () => proxy?.close());

  it('forwards what it lists, the emulator control plane here', async () => {
    const res = await httpGet(`${proxy.url}/__emulator/tokens`);
    expect(res.status).toBe(200);
    expect(res.json()).toEqual(env.emulator.tokens.all);
  });

  it('still refuses, naming every listed prefix, what it does not list', async () => {
    expectRefusedByRule(await send(`${proxy.url}/health`), '/api/, /__emulator/');
  });
});

describe('hop-by-hop headers of a forwarded answer', () => {
  it('are the client connection’s own: a client that asks to close gets Connection: close, never the instance’s keep-alive', async () => {
    const { token } = env.emulator.tokens.member(0);
    const res = await sendRawRequest(env.proxy.url, 'GET', '/api/v1/projects/1/cases', { authorization: `Bearer ${token}` });
    expect(res.status).toBe((await httpGet(`${env.emulator.url}/api/v1/projects/1/cases`, token)).status);
    expect(res.headers['connection']).toBe('close');
    expect(res.headers['keep-alive']).toBeUndefined();
  });
});
