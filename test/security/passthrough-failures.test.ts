/**
 * The passthrough path is as solid as the cached one (hardening item 8): a write or any other
 * forwarded request whose upstream refuses, never answers or answers 503 gets the cached path's
 * JSON 502/504 within the configured timeouts, naming no internal address; tm-cache never
 * retries on the client's behalf; and each forwarded request is one debug log line.
 */
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startProxy, type RunningProxy } from '../../src/serve.js';
import { startTestEmulator, type TestEmulator } from '../helpers/emulator.js';
import { startHostileUpstream, type HostileUpstream } from '../helpers/hostile.js';
import { findFreePort } from '../helpers/ports.js';
import { makeConfig, startTestProxy, type TestProxy } from '../helpers/proxy.js';
import { sendRaw } from '../helpers/raw-request.js';
import { until } from '../helpers/wait.js';

const TIMEOUTS = { connectTimeoutMs: 300, headersTimeoutMs: 300, bodyTimeoutMs: 300 };

/** A write through `proxyUrl`; the client gives up after 5 s, far below node's 300 s request timeout. */
async function patch(proxyUrl: string, path = '/api/v1/projects/1?notify=1') {
  const res = await request(proxyUrl + path, {
    method: 'PATCH',
    headers: { authorization: 'Bearer sekrit-token', 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'renamed' }),
    headersTimeout: 5_000,
    bodyTimeout: 5_000,
  });
  const text = await res.body.text();
  return { status: res.statusCode, headers: res.headers, text };
}

describe('an upstream that refuses connections', () => {
  let proxy: TestProxy;
  let port: number;
  beforeAll(async () => {
    port = await findFreePort();
    proxy = await startTestProxy(`http://127.0.0.1:${port}`, { upstream: TIMEOUTS });
  });
  afterAll(async () => proxy?.close());

  it('gives a write a JSON 502 that names no address', async () => {
    const res = await patch(proxy.url);
    expect(res.status).toBe(502);
    expect(res.headers['content-type']).toMatch(/^application\/json/);
    expect(JSON.parse(res.text)).toEqual({ message: 'Upstream unavailable: the upstream refused the connection.', errors: {} });
    expect(res.text).not.toContain('127.0.0.1');
    expect(res.text).not.toContain(String(port));
  });
});

describe('a hostile upstream', () => {
  let upstream: HostileUpstream;
  let proxy: TestProxy;
  beforeAll(async () => {
    upstream = await startHostileUpstream();
    proxy = await startTestProxy(upstream.url, { upstream: TIMEOUTS });
  });
  afterAll(async () => {
    await proxy?.close();
    await upstream?.close();
  });

  it('that accepts a write and never answers gives a JSON 504 within upstream.headersTimeoutMs', async () => {
    upstream.answer = (req) => req.method === 'PATCH'; // handled: never answered
    const res = await patch(proxy.url);
    expect(res.status).toBe(504);
    expect(JSON.parse(res.text)).toEqual({ message: 'Upstream unavailable: the upstream did not answer in time.', errors: {} });
  });

  it('never receives a request target the passthrough will not send: the house JSON error body instead', async () => {
    // Inside /api/ (no whole `..` segment), but reply-from refuses any `/..` in a path.
    const before = upstream.seen.length;
    const res = await sendRaw(proxy.url, '/api/v1/projects/1/..cases');
    expect(res.status).toBe(400);
    expect(JSON.parse(res.text)).toEqual({ message: expect.stringContaining('refused'), errors: {} });
    expect(upstream.seen.length).toBe(before);
  });

  it('that answers a forwarded GET 503 is asked once, and its Retry-After is relayed capped', async () => {
    upstream.answer = (req, res) => {
      if (req.url !== '/api/v1/projects/1/cases') return false;
      res.writeHead(503, { 'content-type': 'application/json', 'retry-after': '99999999999' }).end('{"message":"Maintenance.","errors":{}}');
      return true;
    };
    const before = upstream.seen.length;
    const res = await proxy.get('/api/v1/projects/1/cases', 'u1');
    expect(res.status).toBe(503);
    expect(res.headers['retry-after']).toBe('600'); // upstream.maxRetryAfterMs, 10 minutes by default
    expect(upstream.seen.slice(before)).toEqual(['GET /api/v1/projects/1/cases']);
  });
});

/**
 * A self-signed certificate for 127.0.0.1, made for this test alone (`openssl req -x509 -newkey
 * ec ... -days 36500`): no client trusts it, which is the point.
 */
const UNTRUSTED_TLS = {
  key: `-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgTAa5Me7ZYl5iTBjZ
sQy/gSUxCUbucv3JAZTVYOiX+iShRANCAAS5e/GmMH3Z4bOGgq3zJkSI6aSDgJr0
YJ1vDnjXznDXKhmhb7R2xaKayh24NmmeK9b1nPxB1dZYtOQWOAlojs82
-----END PRIVATE KEY-----`,
  cert: `-----BEGIN CERTIFICATE-----
MIIBkTCCATagAwIBAgIUbEesqzBcaLSBaTWXcxSnmeVkr1YwCgYIKoZIzj0EAwIw
FDESMBAGA1UEAwwJMTI3LjAuMC4xMCAXDTI2MTEyMzE1NDI0MloYDzIxMjYxMDMw
MTU0MjQyWjAUMRIwEAYDVQQDDAkxMjcuMC4wLjEwWTATBgcqhkjOPQIBBggqhkjO
PQMBBwNCAAS5e/GmMH3Z4bOGgq3zJkSI6aSDgJr0YJ1vDnjXznDXKhmhb7R2xaKa
yh24NmmeK9b1nPxB1dZYtOQWOAlojs82o2QwYjAdBgNVHQ4EFgQUOvrPedWCO0AF
5+27lGA3hDqz688wHwYDVR0jBBgwFoAUOvrPedWCO0AF5+27lGA3hDqz688wDwYD
VR0TAQH/BAUwAwEB/zAPBgNVHREECDAGhwR/AAABMAoGCCqGSM49BAMCA0kAMEYC
IQDhTQnJlplEZeiYdWf1mZ1HUmhYPSydnxeui4cDR0qNrgIhAMj/l2dITDyx6HUB
A6iS4/wh6UkwJNu0egk7TAyETX0u
-----END CERTIFICATE-----`,
};

describe('an https upstream whose certificate is not trusted', () => {
  const seen: string[] = [];
  const server = createHttpsServer(UNTRUSTED_TLS, (req, res) => {
    seen.push(`${req.method} ${req.url} ${req.headers.authorization ?? ''}`);
    res.writeHead(204).end();
  });
  let proxy: TestProxy;
  beforeAll(async () => {
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    proxy = await startTestProxy(`https://127.0.0.1:${(server.address() as AddressInfo).port}`, { upstream: TIMEOUTS });
  });
  afterAll(async () => {
    await proxy?.close();
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  it('never receives a forwarded write, nor the credential it carries: 502', async () => {
    const res = await patch(proxy.url);
    expect(res.status).toBe(502);
    expect(JSON.parse(res.text)).toEqual({ message: expect.stringMatching(/^Upstream unavailable: /), errors: {} });
    expect(seen).toEqual([]);
  });
});

describe('logging of forwarded requests', () => {
  const lines: Array<Record<string, unknown>> = [];
  const raw: string[] = [];
  let emulator: TestEmulator;
  let proxy: RunningProxy;
  let refusing: RunningProxy;
  beforeAll(async () => {
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        raw.push(chunk.toString());
        lines.push(JSON.parse(chunk.toString()) as Record<string, unknown>);
        done();
      },
    });
    const logger = pino({ level: 'debug' }, sink);
    emulator = await startTestEmulator();
    proxy = await startProxy(makeConfig(emulator.url, { upstream: TIMEOUTS }), { logger });
    refusing = await startProxy(makeConfig(`http://127.0.0.1:${await findFreePort()}`, { upstream: TIMEOUTS }), { logger });
  });
  afterAll(async () => {
    await proxy?.close();
    await refusing?.close();
    await emulator?.close();
  });

  it.each([
    ['answered', () => proxy.url],
    ['failed', () => refusing.url],
  ])('is one access line per %s request: method, path without query, status, upstream ms; never the credential', async (_, url) => {
    lines.length = 0;
    raw.length = 0;
    const res = await patch(url());
    // Written once the response is done on the server's side, which may be just after the client has it.
    // Other lines may come meanwhile (a refused connection marks the upstream down: a warning of its own).
    const access = () => lines.filter((line) => line['msg'] === 'access');
    await until(() => access().length > 0);
    expect(access()).toHaveLength(1);
    expect(access()[0]).toMatchObject({
      level: 30,
      msg: 'access',
      outcome: 'passthrough',
      method: 'PATCH',
      path: '/api/v1/projects/1',
      status: res.status,
      upstreamMs: expect.any(Number),
    });
    expect(raw.join('')).not.toMatch(/sekrit|notify=1/);
  });
});
