/**
 * The admin API is authorized on the route that matched, never on the URL string: every spelling
 * a router might decode or normalize to an admin route (percent-encoded letters, absolute-form,
 * HEAD, trailing slash, dot segments, doubled slashes, case) is refused without the token, and
 * with `admin.token` unset every one of them is a 404. A source that keeps failing is slowed
 * down; failures are counted and logged without what was presented. Real HTTP, raw request lines.
 */
import { Writable } from 'node:stream';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_FAILURES } from '../../src/ops/admin-guard.js';
import { startProxy, type RunningProxy } from '../../src/serve.js';
import { startTestEmulator, type TestEmulator } from '../helpers/emulator.js';
import { readGauge } from '../helpers/metrics.js';
import { makeConfig, startTestProxy, type TestProxy } from '../helpers/proxy.js';
import { sendRawRequest } from '../helpers/raw-request.js';

const TOKEN = 'admin-token-for-tests-0123456789';
const ROUTES = ['/admin/stats', '/admin/entries', '/admin/purge'] as const;

/** Every spelling of `route` that some router decodes, strips or resolves back to `route`. */
function spellingsOf(route: string, host: string): string[] {
  const rest = route.slice('/admin'.length);
  return [
    route,
    `/%61dmin${rest}`,
    `/%61%64%6d%69%6e${rest}`,
    `/admin${rest.replace('/', '%2F')}`,
    `/admin${rest.replace('/', '%2f')}`,
    `/%2561dmin${rest}`,
    `//admin${rest}`,
    `/./admin${rest}`,
    `/x/../admin${rest}`,
    `/admin/.${rest}`,
    `${route}/`,
    `${route}?`,
    `${route}?x=1`,
    `${route};x`,
    route.toUpperCase(),
    `/Admin${rest}`,
    `http://${host}${route}`,
    `http://x${route}`,
    `http://x/%61dmin${rest}`,
  ];
}

let emulator: TestEmulator;
beforeAll(async () => {
  emulator = await startTestEmulator();
});
afterAll(async () => {
  await emulator.close();
});

/** Sends every method and spelling; answers the requests that were served as if authorized. */
async function reachedWithout(p: RunningProxy, headers: Record<string, string>): Promise<string[]> {
  const host = new URL(p.managementUrl).host;
  const reached: string[] = [];
  // Each request from its own loopback address, so the guard's slow-down of a failing source never
  // answers in the route check's place (a 429 is not accepted below).
  let n = 0;
  for (const route of ROUTES) {
    for (const target of spellingsOf(route, host)) {
      for (const method of ['GET', 'HEAD', 'OPTIONS', 'POST']) {
        const body = method === 'POST' ? '{"all":true}' : undefined;
        n++;
        const res = await sendRawRequest(p.managementUrl, method, target, headers, body, `127.0.${n >> 8}.${n & 255 || 1}`);
        // 2xx is an admin answer; any other status that is not a refusal (401, or the router's 400/404/405) is suspect too.
        if (![400, 401, 404, 405].includes(res.status)) reached.push(`${method} ${target} → ${res.status}`);
      }
    }
  }
  return reached;
}

describe('admin routes are authorized on the route that matched', () => {
  let p: TestProxy;
  beforeAll(async () => {
    p = await startTestProxy(emulator.url, { admin: { token: TOKEN } });
  });
  afterAll(async () => {
    await p.close();
  });

  it('refuses every spelling of every admin route without the token, and a purge so refused drops nothing', async () => {
    const m = emulator.tokens.member(0);
    const path = `/api/v1/projects/${m.project_ids[0]}/runs?per_page=15`;
    await p.get(path, m.token);
    expect((await p.get(path, m.token)).headers['cache-status']).toMatch(/hit/);

    expect(await reachedWithout(p, {})).toEqual([]);
    expect(await reachedWithout(p, { authorization: 'Bearer nope' })).toEqual([]);
    expect((await p.get(path, m.token)).headers['cache-status'], 'the entry outlived every refused purge').toMatch(/hit/);
  });

  it('matches the decoded and absolute-form spellings to the admin route, which then needs the token', async () => {
    // Proof that the spellings above reach the route (so their refusal is the guard's, not the router's).
    const host = new URL(p.managementUrl).host;
    for (const target of ['/%61dmin/stats', `http://${host}/admin/stats`, 'http://x/%61dmin/stats']) {
      const res = await sendRawRequest(p.managementUrl, 'GET', target, { authorization: `Bearer ${TOKEN}` }, undefined, '127.0.200.1');
      expect(res.status, target).toBe(200);
      expect(JSON.parse(res.text)).toHaveProperty('requests');
    }
  });
});

describe('with admin.token unset', () => {
  it('answers 404 to every spelling of every admin route, whatever the Authorization', async () => {
    const p = await startTestProxy(emulator.url, {});
    try {
      const host = new URL(p.managementUrl).host;
      for (const route of [...ROUTES, '/']) {
        const targets = route === '/' ? ['/', '/?x=1', `http://${host}/`] : spellingsOf(route, host);
        for (const target of targets) {
          for (const headers of [{}, { authorization: 'Bearer ' }, { authorization: `Bearer ${TOKEN}` }] as Record<string, string>[]) {
            const method = route === '/admin/purge' ? 'POST' : 'GET';
            const res = await sendRawRequest(p.managementUrl, method, target, headers, method === 'POST' ? '{"all":true}' : undefined);
            expect(res.status, `${method} ${target}`).toBe(404);
          }
        }
      }
    } finally {
      await p.close();
    }
  });
});

describe('failed admin authentications', () => {
  it('are counted, logged at most once per window without the presented token, and slow the failing source down', async () => {
    const lines: string[] = [];
    const sink = new Writable({
      write: (chunk: Buffer, _enc, done) => {
        lines.push(chunk.toString());
        done();
      },
    });
    const p = await startProxy(makeConfig(emulator.url, { admin: { token: TOKEN } }), { logger: pino({ level: 'info' }, sink) });
    try {
      const guess = 'guessed-token-SECRET-VALUE-42';
      const statuses: number[] = [];
      for (let i = 0; i < MAX_FAILURES + 2; i++) {
        statuses.push((await sendRawRequest(p.managementUrl, 'GET', '/%61dmin/entries', { authorization: `Bearer ${guess}${i}` })).status);
      }
      expect(statuses.slice(0, MAX_FAILURES)).toEqual(Array(MAX_FAILURES).fill(401));
      expect(statuses.slice(MAX_FAILURES)).toEqual([429, 429]);
      // Slowed down means the right token does not help the same source either, until its window ends.
      const locked = await sendRawRequest(p.managementUrl, 'GET', '/admin/stats', { authorization: `Bearer ${TOKEN}` });
      expect(locked.status).toBe(429);
      expect(Number(locked.headers['retry-after'])).toBeGreaterThan(0);
      expect(JSON.parse(locked.text).message).toMatch(/failed admin authentications/);

      expect(await readGauge(p.managementUrl, 'tm_cache_admin_auth_failures_total')).toBe(MAX_FAILURES);
      const failures = lines.filter((l) => l.includes('admin authentication failed'));
      expect(failures).toHaveLength(1);
      expect(failures[0]).toContain('"route":"/admin/entries"');
      expect(lines.join('')).not.toContain(guess);
      expect(lines.join('')).not.toContain(TOKEN);
    } finally {
      await p.close();
    }
  });

  it('keeps the status page readable without the token while the API is on', async () => {
    const p = await startTestProxy(emulator.url, { admin: { token: TOKEN } });
    try {
      const page = await sendRawRequest(p.managementUrl, 'GET', '/', {});
      expect(page.status).toBe(200);
      expect(page.headers['content-type']).toMatch(/text\/html/);
    } finally {
      await p.close();
    }
  });
});
