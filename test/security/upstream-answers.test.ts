/**
 * Hostile or odd upstream answers (hardening item 7): what the instance, or something standing in
 * front of it, answers must not become the API's answer, a caller, or a lock-out. A node:http
 * upstream plays the parts the emulator cannot: an SSO login page, a redirect, a huge Retry-After.
 */
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { on, startHostileUpstream, type HostileUpstream } from '../helpers/hostile.js';
import { startTestProxy, type TestProxy } from '../helpers/proxy.js';

const MAX_RETRY_AFTER_MS = 120_000;
const PROJECTS = JSON.stringify({ page: 1, prev_page: null, next_page: null, last_page: 1, per_page: 100, total: 0, result: [], expands: {} });
const HTML = { 'content-type': 'text/html; charset=utf-8' };
const SSO = 'https://sso.example/login?next=%2Fapi%2Fv1%2Fprojects';

let upstream: HostileUpstream;
let proxy: TestProxy;
let clockMs = Date.now();

beforeAll(async () => {
  upstream = await startHostileUpstream();
  proxy = await startTestProxy(upstream.url, { upstream: { maxRetryAfterMs: MAX_RETRY_AFTER_MS } }, () => clockMs);
});
afterAll(async () => {
  await proxy?.close();
  await upstream?.close();
});

const reached = (path: string) => upstream.seen.filter((s) => s === `GET ${path}`).length;

describe('a non-JSON answer to a JSON operation', () => {
  it('is never stored, and is answered 502 with a JSON body naming its status and content type', async () => {
    upstream.answer = on('/api/v1/projects', 200, HTML, '<html><form>Sign in</form></html>');
    const before = reached('/api/v1/projects');
    for (let i = 0; i < 2; i++) {
      const res = await proxy.get('/api/v1/projects', 'u1');
      expect(res.status).toBe(502);
      expect(res.headers['content-type']).toMatch(/^application\/json/);
      expect(res.json()).toEqual({ message: expect.stringContaining('200 text/html'), errors: {} });
      expect(res.body.toString()).not.toContain('<html>');
    }
    expect(reached('/api/v1/projects') - before).toBe(2);
  });

  it('from GET /user makes no caller, even when its body reads as a user', async () => {
    upstream.answer = on('/api/v1/user', 200, HTML, '{"id": 3}');
    const before = reached('/api/v1/projects');
    const res = await proxy.get('/api/v1/projects', 'u3');
    expect(res.status).toBe(502);
    expect(res.json()).toEqual({ message: expect.stringMatching(/GET \/user.*200 text\/html/), errors: {} });
    expect(reached('/api/v1/projects')).toBe(before);
  });
});

describe('a project access confirmation answered by a 200 that is not JSON (an SSO or maintenance page)', () => {
  it('confirms nothing: the cached entry of the project is not served on its word', async () => {
    const CONFIRM_MS = 1_000;
    let clock = Date.now();
    const confirming = await startTestProxy(upstream.url, { access: { projectConfirmMs: CONFIRM_MS } }, () => clock);
    try {
      upstream.answer = on('/api/v1/projects/5', 200, { 'content-type': 'application/json' }, '{"id":5,"name":"Five","project_id":5}');
      expect((await confirming.get('/api/v1/projects/5', 'u21')).status).toBe(200);
      expect((await confirming.get('/api/v1/projects/5', 'u21')).headers['cache-status']).toMatch(/^tm-cache; hit/);

      clock += CONFIRM_MS + 1; // the confirmation lapsed; the entry itself is still fresh
      upstream.answer = on('/api/v1/projects/5', 200, HTML, '<html>Maintenance</html>');
      const res = await confirming.get('/api/v1/projects/5', 'u21');
      expect(res.status).toBe(502);
      expect(res.json()).toEqual({ message: expect.stringContaining('200 text/html'), errors: {} });
    } finally {
      await confirming.close();
    }
  });
});

describe('a 401 or 403 that is not JSON (an SSO gateway refusing)', () => {
  it.each([401, 403])('%i is relayed untouched, status, content type and body, and never stored', async (status) => {
    const page = `<html>refused ${status}</html>`;
    upstream.answer = on('/api/v1/projects', status, HTML, page);
    const before = reached('/api/v1/projects');
    for (let i = 0; i < 2; i++) {
      const res = await proxy.get('/api/v1/projects', `refused-${status}`);
      expect(res.status).toBe(status);
      expect(res.headers['content-type']).toBe(HTML['content-type']);
      expect(res.body.toString()).toBe(page);
    }
    expect(reached('/api/v1/projects') - before).toBe(2);
  });
});

describe('a compressed GET /user that inflates past any user object (a decompression bomb)', () => {
  it('is no caller: inflating stops at a small bound and the client gets a 502', async () => {
    const bomb = gzipSync(`{"id": 3, "padding": "${' '.repeat(32 * 1024 * 1024)}"}`);
    upstream.answer = on('/api/v1/user', 200, { 'content-type': 'application/json', 'content-encoding': 'gzip' }, bomb);
    const before = reached('/api/v1/projects');
    const res = await proxy.get('/api/v1/projects', 'u-bomb');
    expect(res.status).toBe(502);
    expect(res.json()).toEqual({ message: expect.stringContaining('GET /user'), errors: {} });
    expect(reached('/api/v1/projects')).toBe(before);
  });
});

describe('a redirect', () => {
  it('is relayed whole, Location included, and never stored', async () => {
    upstream.answer = on('/api/v1/projects', 302, { location: SSO, ...HTML }, '<a href="…">moved</a>');
    const before = reached('/api/v1/projects');
    for (let i = 0; i < 2; i++) {
      const res = await proxy.get('/api/v1/projects', 'u2');
      expect(res.status).toBe(302);
      expect(res.headers['location']).toBe(SSO);
    }
    expect(reached('/api/v1/projects') - before).toBe(2);
  });

  it('from GET /user is relayed whole and makes no caller', async () => {
    upstream.answer = on('/api/v1/user', 302, { location: SSO });
    const before = { user: reached('/api/v1/user'), projects: reached('/api/v1/projects') };
    for (let i = 0; i < 2; i++) {
      const res = await proxy.get('/api/v1/projects', 'u4');
      expect(res.status).toBe(302);
      expect(res.headers['location']).toBe(SSO);
    }
    expect(reached('/api/v1/user') - before.user).toBe(2);
    expect(reached('/api/v1/projects')).toBe(before.projects);
  });
});

describe('a Retry-After beyond upstream.maxRetryAfterMs', () => {
  it.each([
    ['delay-seconds', '99999999999', 'u5'],
    ['an HTTP-date', 'Fri, 31 Dec 9999 23:59:59 GMT', 'u6'],
  ])('given as %s, is relayed capped, and the caller is free again once the cap has passed', async (_, retryAfter, token) => {
    let limited = true;
    upstream.answer = (req, res) => {
      if (req.url !== '/api/v1/projects') return false;
      if (limited) res.writeHead(429, { 'content-type': 'application/json', 'retry-after': retryAfter }).end('{"message":"Too many requests.","errors":{}}');
      else res.writeHead(200, { 'content-type': 'application/json' }).end(PROJECTS);
      limited = false;
      return true;
    };
    const before = reached('/api/v1/projects');
    const first = await proxy.get('/api/v1/projects', token);
    expect(first.status).toBe(429);
    expect(first.headers['retry-after']).toBe(String(MAX_RETRY_AFTER_MS / 1000));
    const gated = await proxy.get('/api/v1/projects', token);
    expect(gated.status).toBe(429);
    expect(Number(gated.headers['retry-after'])).toBeLessThanOrEqual(MAX_RETRY_AFTER_MS / 1000);
    expect(reached('/api/v1/projects') - before).toBe(1);

    clockMs += MAX_RETRY_AFTER_MS + 1;
    const after = await proxy.get('/api/v1/projects', token);
    expect(after.status).toBe(200);
    expect(reached('/api/v1/projects') - before).toBe(2);
  });

  it('on a 429 from GET /user, is relayed capped', async () => {
    upstream.answer = on(
      '/api/v1/user',
      429,
      { 'content-type': 'application/json', 'retry-after': '99999999999' },
      '{"message":"Too many requests.","errors":{}}',
    );
    const res = await proxy.get('/api/v1/projects', 'u8');
    expect(res.status).toBe(429);
    expect(res.headers['retry-after']).toBe(String(MAX_RETRY_AFTER_MS / 1000));
  });
});
