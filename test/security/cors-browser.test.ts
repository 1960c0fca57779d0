/**
 * A browser dashboard on another origin reads cached answers: a real headless Chromium fetches
 * through tm-cache, cross-origin with a bearer token, from two dashboards on two origins, in front
 * of the real emulator answering with CORS (its control plane's `cors` option: the allowed Origin
 * reflected, `Vary: Origin`). The cached answer keeps the instance's Access-Control-Allow-*
 * (`cache.storedHeaders`) and, as the instance varies on Origin, is keyed on it, so each origin gets an answer its browser
 * accepts; what reached the emulator is counted.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchChromium, openTab } from '../helpers/chromium.js';
import { startTestEmulator, type TestEmulator } from '../helpers/emulator.js';
import { httpGet, startTestProxy, type TestProxy } from '../helpers/proxy.js';

let emulator: TestEmulator;
let proxy: TestProxy;
let browser: Browser;
const dashboards: Server[] = [];

/** A dashboard's own origin: an empty page, from which the test's fetches run. */
async function startDashboard(): Promise<string> {
  const server = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/html' });
    res.end('<!doctype html><title>dashboard</title>');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  dashboards.push(server);
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

interface BrowserFetch {
  ok?: boolean;
  status?: number;
  cacheStatus?: string | null;
  allowOrigin?: string | null;
  error?: string;
}

/** fetch() from a page on `origin`, with the token, as a dashboard's script does it. */
async function fetchFrom(origin: string, url: string, token: string): Promise<BrowserFetch> {
  const tab = await openTab(browser, `${origin}/`);
  try {
    return await tab.page.evaluate(
      async ([target, bearer]) => {
        try {
          const res = await fetch(target!, { headers: { authorization: `Bearer ${bearer}` } });
          await res.text();
          return { ok: res.ok, status: res.status, cacheStatus: res.headers.get('cache-status') };
        } catch (err) {
          return { error: String(err) }; // a CORS refusal: the script sees only a TypeError
        }
      },
      [url, token],
    );
  } finally {
    await tab.close();
  }
}

const reads = async (route: string) => (await emulator.stats()).by_route[route] ?? 0;

beforeAll(async () => {
  emulator = await startTestEmulator();
  proxy = await startTestProxy(emulator.url);
  browser = await launchChromium();
});

afterAll(async () => {
  await browser?.close();
  await proxy?.close();
  await emulator?.close();
  for (const server of dashboards) server.close();
});

describe('a cross-origin browser dashboard', () => {
  it("reads a cached answer with the instance's CORS headers, and each origin gets its own", { timeout: 60_000 }, async () => {
    const [first, second] = [await startDashboard(), await startDashboard()];
    await emulator.faults({ cors: { origins: [first, second], expose_headers: 'ETag, Cache-Status' } });
    try {
      const { token, project_ids } = emulator.tokens.member(0);
      const url = `${proxy.url}/api/v1/projects/${project_ids[0]}/milestones`;
      const route = 'GET /api/v1/projects/{project_id}/milestones';
      const before = await reads(route);

      const miss = await fetchFrom(first, url, token);
      expect(miss).toMatchObject({ ok: true, status: 200 });
      const hit = await fetchFrom(first, url, token);
      // The browser accepted the cached answer and let the script read its exposed Cache-Status.
      expect(hit).toMatchObject({ ok: true, status: 200 });
      expect(hit.cacheStatus).toMatch(/; hit/);
      expect(await reads(route)).toBe(before + 1);

      // Another origin: the instance varies on Origin, so its answer is its own (one more fill),
      // and then cached for it too.
      expect(await fetchFrom(second, url, token)).toMatchObject({ ok: true, status: 200 });
      const secondHit = await fetchFrom(second, url, token);
      expect(secondHit).toMatchObject({ ok: true, status: 200 });
      expect(secondHit.cacheStatus).toMatch(/; hit/);
      expect(await reads(route)).toBe(before + 2);

      // Without an Origin (an SDK, a CI job) the key is the one it always was: a fill of its own,
      // whose answer names no origin.
      const plain = await httpGet(url, token);
      expect(plain.headers['access-control-allow-origin']).toBeUndefined();
      expect(plain.headers['vary']).toMatch(/Origin/);
      expect((await httpGet(url, token)).headers['cache-status']).toMatch(/; hit/);
    } finally {
      await emulator.clearFaults();
    }
  });
});
