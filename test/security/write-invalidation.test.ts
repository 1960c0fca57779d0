/**
 * Threat: a write that the instance accepts under another spelling of its target (`/projects/02`,
 * `/projects/2/`, a fragment, percent-encoded digits) must not leave the answers of that resource
 * cached. Write paths are parsed as read paths are (src/api/route.ts), from the target as it is
 * forwarded, so the invalidation tag is the canonical one.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { request, type Dispatcher } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FreshnessPolicy } from '../../src/cache/policy.js';
import { DEFAULT_CONFIG } from '../../src/config/schema.js';
import { startTestProxy, type TestProxy } from '../helpers/proxy.js';
import { sendRawRequest } from '../helpers/raw-request.js';
import { proxyOverEmulator } from '../helpers/setup.js';

const env = proxyOverEmulator();

async function write(method: string, path: string, token: string): Promise<number> {
  const res = await request(`${env.proxy.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: '{}',
  });
  await res.body.dump();
  return res.statusCode;
}

/** Reads `path` twice through `proxy`: the second read is a hit. */
async function expectCached(proxy: TestProxy, path: string, token: string): Promise<void> {
  await proxy.get(path, token);
  expect((await proxy.get(path, token)).headers['cache-status'], path).toMatch(/hit/);
}

/** The next read of `path` through `proxy` finds nothing cached. */
async function expectDropped(proxy: TestProxy, path: string, token: string): Promise<void> {
  expect((await proxy.get(path, token)).headers['cache-status'], path).toMatch(/fwd=uri-miss/);
}

describe('a successful write drops what it names, however the id is spelled', () => {
  it.each([
    ['PATCH', '/api/v1/projects/0:id'],
    ['PUT', '/api/v1/projects/00:id/'],
    ['POST', '/api/v1/projects/0:id/runs'],
  ])('%s %s', async (method, spelling) => {
    const { token, project_ids } = env.emulator.tokens.member(0);
    const project = project_ids[0]!;
    const cached = [`/api/v1/projects/${project}`, `/api/v1/projects/${project}/runs?per_page=15`];
    for (const path of cached) await expectCached(env.proxy, path, token);
    expect(await write(method, spelling.replace(':id', String(project)), token)).toBeLessThan(300);
    for (const path of cached) await expectDropped(env.proxy, path, token);
  });
});

/** The id of a run member 0 may read, from the first page of their first project's runs. */
async function aRunOfMember0(): Promise<{ token: string; run: number }> {
  const { token, project_ids } = env.emulator.tokens.member(0);
  const page = (await env.proxy.get(`/api/v1/projects/${project_ids[0]!}/runs?per_page=15`, token)).json() as { result: { id: number }[] };
  return { token, run: page.result[0]!.id };
}

describe('a write drops what the forwarded write names, whatever fragment its target carries', () => {
  // Over a raw socket: no HTTP client sends a fragment, but a hand-written request may, and node
  // passes it on in req.url; the write forwarded without it is the instance's to apply.
  it.each([
    ['PUT', '/api/v1/runs/:id#x'],
    ['PATCH', '/api/v1/runs/:id#/elsewhere'],
    ['DELETE', '/api/v1/runs/:id#'],
  ])('%s %s', async (method, spelling) => {
    const { token, run } = await aRunOfMember0();
    await expectCached(env.proxy, `/api/v1/runs/${run}`, token);
    const res = await sendRawRequest(env.proxy.url, method, spelling.replace(':id', String(run)), { authorization: `Bearer ${token}` }, '{}');
    expect(res.status).toBe(204);
    expect((await env.emulator.stats()).by_route[`${method} /api/v1/runs/{run_id}`]).toBe(1);
    await expectDropped(env.proxy, `/api/v1/runs/${run}`, token);
  });
});

describe('a write drops what it names when a front before the instance decodes percent-encoded digits', () => {
  let front: { url: string; close(): Promise<void> };
  let proxy: TestProxy;
  beforeAll(async () => {
    front = await startDigitDecodingFront(env.emulator.url);
    proxy = await startTestProxy(front.url);
  });
  afterAll(async () => {
    await proxy?.close();
    await front?.close();
  });

  it('PUT /api/v1/runs/%3N%3N%3N drops the cached run N', async () => {
    const { token, run } = await aRunOfMember0();
    await expectCached(proxy, `/api/v1/runs/${run}`, token);
    const encoded = `/api/v1/runs/${[...String(run)].map((digit) => `%3${digit}`).join('')}`;
    const res = await sendRawRequest(proxy.url, 'PUT', encoded, { authorization: `Bearer ${token}` }, '{}');
    expect(res.status).toBe(204);
    expect((await env.emulator.stats()).by_route['PUT /api/v1/runs/{run_id}']).toBe(1);
    await expectDropped(proxy, `/api/v1/runs/${run}`, token);
  });
});

describe('the resources a write names are read after percent-encoded unreserved characters are decoded', () => {
  const policy = () => new FreshnessPolicy(DEFAULT_CONFIG.cache.freshness, DEFAULT_CONFIG.cache.staleIfErrorMs);
  it.each([
    ['/api/v1/runs/%33%35%37', ['run:357']],
    ['/api/v1/runs/%33%35%37/results', ['run:357']],
    ['/api/v1/projects/%34/runs', ['project', 'project:4']],
    ['/api/v1/%72%75%6E%73/7', ['run:7']],
    ['/api/%761/runs/%37', ['run:7']],
    ['/api/v1/runs/%37%2F8', []],
  ])('a write to %s drops %j', (path, tags) => {
    expect(policy().tagsForWrite(path)).toEqual(tags);
  });
});

/**
 * A front before the instance (a load balancer) that decodes percent-encoded digits in the path
 * before passing a request on, as RFC 3986 §6.2.2.2 allows; the emulator itself does not.
 */
async function startDigitDecodingFront(instanceUrl: string): Promise<{ url: string; close(): Promise<void> }> {
  const server = createServer((req, res) => {
    void (async () => {
      const chunks: Buffer[] = [];
      for await (const chunk of req) chunks.push(chunk as Buffer);
      const target = (req.url ?? '/').replace(/%3([0-9])/g, '$1');
      const answer = await request(instanceUrl + target, {
        method: req.method as Dispatcher.HttpMethod,
        headers: { authorization: req.headers.authorization ?? '', 'content-type': req.headers['content-type'] ?? 'application/json' },
        ...(chunks.length === 0 ? {} : { body: Buffer.concat(chunks) }),
      });
      const body = Buffer.from(await answer.body.arrayBuffer());
      res.writeHead(answer.statusCode, { 'content-type': String(answer.headers['content-type'] ?? 'application/json') }).end(body);
    })();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
