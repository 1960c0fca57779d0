/**
 * The status page at GET / on the management port, in a real headless Chromium, against a real
 * tm-cache (memory + a private redis-server) in front of the real emulator, after real traffic:
 * misses, hits, a passthrough and a 429. What the page shows must be what /admin/stats says.
 * The fixture-driven cases (hostile strings, a known series, 404) are in status-page-render.test.ts.
 */
import { mkdirSync } from 'node:fs';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { STATUS_PAGE_CSP, STATUS_PAGE_HTML } from '../../src/ops/status-page.js';
import { launchChromium, openTab, readStat, readTopTable, signIn, waitForFigures, type StorageState, type Tab } from '../helpers/chromium.js';
import { startTestEmulator, type TestEmulator } from '../helpers/emulator.js';
import { httpGet, startTestProxy, type TestProxy } from '../helpers/proxy.js';
import { startRedis, type RedisHandle } from '../helpers/redis.js';
import { until } from '../helpers/wait.js';

const ADMIN_TOKEN = 'status-page-test-admin-token-7f3a9c';
const VIEWER_TOKEN = 'status-page-test-viewer-token-2b81d4';
const TOKEN_KEY = 'tm-cache.adminToken';
/** Requests of `sendTraffic` the instance received that are not the cache's (a path outside the catalogue): not in the offload's figures. */
const PASSTHROUGH_REQUESTS = 1;
const BUCKET_MS = 10_000;
const RATE_WINDOW_MS = 30_000;

type Stats = any;

let redis: RedisHandle;
let emulator: TestEmulator;
let proxy: TestProxy;
let browser: Browser;

async function adminStats(token = ADMIN_TOKEN): Promise<Stats> {
  const res = await httpGet(`${proxy.managementUrl}/admin/stats`, token);
  expect(res.status).toBe(200);
  return res.json();
}

/** Misses, then hits, for two users; a bypass and a passthrough; an upstream 429 for a third user. */
async function sendTraffic(): Promise<void> {
  const [a, b, c] = [emulator.tokens.member(0), emulator.tokens.member(1), emulator.tokens.member(2)];
  const paths = (projectId: number) => [
    '/api/v1/projects?per_page=15',
    `/api/v1/projects/${projectId}`,
    `/api/v1/projects/${projectId}/runs?per_page=25`,
    `/api/v1/projects/${projectId}/milestones`,
  ];
  for (const user of [a, b]) {
    for (const path of paths(user.project_ids[0]!)) {
      for (let i = 0; i < 4; i++) expect((await proxy.get(path, user.token)).status).toBe(200); // 1 miss, 3 hits
    }
  }
  // A bypass (an unknown query parameter) and a passthrough (a path outside the catalogue).
  expect((await proxy.get(`/api/v1/projects/${a.project_ids[0]}/runs?per_page=15&shiny=1`, a.token)).status).toBe(200);
  await proxy.get(`/api/v1/projects/${a.project_ids[0]}/cases`, a.token);
  await proxy.get('/api/v1/user', c.token);
  await emulator.faults({ rate_limit: { after_n: 0, retry_after_s: 1 } });
  try {
    expect((await proxy.get(`/api/v1/projects/${c.project_ids[0]}/runs?per_page=50`, c.token)).status).toBe(429);
  } finally {
    await emulator.clearFaults();
  }
}

/** The page's figures once it shows stats taken after `after` (the page polls every 2 s). */
async function waitForPollAfter(tab: Tab, after: Stats): Promise<void> {
  await until(async () => Number(await tab.page.getAttribute('body', 'data-now')) > after.now);
}

const num = async (tab: Tab, name: string) => Number((await readStat(tab.page, name)).value);

/** Where the tab keeps its token: this tab's (sessionStorage) and this device's (localStorage). */
async function keptTokens(tab: Tab): Promise<{ tab: string | null; device: string | null }> {
  return tab.page.evaluate(`({ tab: sessionStorage.getItem('${TOKEN_KEY}'), device: localStorage.getItem('${TOKEN_KEY}') })`);
}

/** What a wall screen's browser keeps once "Remember on this device" was ticked with `token`. */
async function rememberedOn(token: string): Promise<StorageState> {
  const wall = await openTab(browser, `${proxy.managementUrl}/`);
  try {
    await signIn(wall.page, token, true);
    await waitForFigures(wall.page);
    return await wall.storageState();
  } finally {
    await wall.close();
  }
}

/** The page's answer to its first token: the figures, or the form saying it was refused. */
async function settled(tab: Tab): Promise<string | null> {
  await tab.page.waitForSelector('body[data-state="ok"], body[data-state="unauthorized"]', { timeout: 15_000 });
  return tab.page.getAttribute('body', 'data-state');
}

beforeAll(async () => {
  redis = await startRedis();
  emulator = await startTestEmulator();
  proxy = await startTestProxy(emulator.url, {
    admin: { token: ADMIN_TOKEN, viewerToken: VIEWER_TOKEN },
    cache: { redis: { url: redis.url, commandTimeoutMs: 2_000 } },
  });
  browser = await launchChromium();
  mkdirSync('test-artifacts', { recursive: true });
  await sendTraffic();
});

afterAll(async () => {
  await browser?.close();
  await proxy?.close();
  await emulator?.close();
  await redis?.stop();
});

describe('the status page on the management port', () => {
  it('is served at / with its Content-Security-Policy', async () => {
    const res = await httpGet(`${proxy.managementUrl}/`);
    expect(res.status).toBe(200);
    expect(res.headers['content-type']).toMatch(/^text\/html/);
    expect(res.headers['content-security-policy']).toBe(STATUS_PAGE_CSP);
    expect(res.body.toString('utf8')).toBe(STATUS_PAGE_HTML);
  });

  it('shows what /admin/stats says after real traffic, with no console error and no CSP violation', { timeout: 60_000 }, async () => {
    const tab = await openTab(browser, `${proxy.managementUrl}/`);
    try {
      await signIn(tab.page, ADMIN_TOKEN);
      await waitForFigures(tab.page);
      // Wait for a complete 10 s bucket holding the traffic, so the rates and the chart have data.
      await until(async () => (await num(tab, 'rate.total')) > 0, 30_000);

      const before = await adminStats();
      await waitForPollAfter(tab, before);
      const shown = {
        hitRatio: await num(tab, 'hitRatio'),
        offload: await num(tab, 'offload'),
        rate: await tab.page
          .locator('[data-stat="rate.total"]')
          .first()
          .evaluate((el) => ({
            value: Number(el.getAttribute('data-value')),
            to: Number(el.getAttribute('data-to')),
            seconds: Number(el.getAttribute('data-seconds')),
          })),
        operations: await readTopTable(tab.page, 'top.operations'),
        users: await readTopTable(tab.page, 'top.users'),
      };
      // Counts only grow: what the page shows lies between a fetch before and one after.
      const counts: [string, (s: Stats) => number][] = [
        ['requests.total', (s) => s.requests.total],
        ['upstream.requests', (s) => s.upstream.requests],
        ['upstream.avoided', (s) => s.upstream.avoided],
        ['bytes.sent', (s) => s.bytes.sent],
        ['upstream.byStatusClass.429', (s) => s.upstream.byStatusClass['429']],
        ['memory.evictions', (s) => s.memory.evictions],
        ['redis.errors', (s) => s.redis.errors],
        ...['hit', 'stale', 'miss', 'coalesced', 'bypass', 'error', 'passthrough'].map(
          (o) => [`requests.byOutcome.${o}`, (s: Stats) => s.requests.byOutcome[o]] as [string, (s: Stats) => number],
        ),
      ];
      const readings = await Promise.all(counts.map(([name]) => num(tab, name)));
      const after = await adminStats();

      for (const [i, [name, pick]] of counts.entries()) {
        expect(readings[i], name).toBeGreaterThanOrEqual(pick(before));
        expect(readings[i], name).toBeLessThanOrEqual(pick(after));
      }
      // What the traffic must have produced.
      expect(await num(tab, 'requests.byOutcome.hit')).toBeGreaterThanOrEqual(24);
      expect(await num(tab, 'requests.byOutcome.miss')).toBeGreaterThanOrEqual(8);
      expect(await num(tab, 'requests.byOutcome.bypass')).toBeGreaterThanOrEqual(1);
      expect(await num(tab, 'requests.byOutcome.passthrough')).toBeGreaterThanOrEqual(1);
      expect(await num(tab, 'upstream.recent429')).toBeGreaterThanOrEqual(1);
      expect(await num(tab, 'upstream.recent429')).toBeLessThanOrEqual(after.upstream.recent429);
      expect(Number((await readStat(tab.page, 'upstream.last429At')).value)).toBe(after.upstream.last429At);
      expect(shown.hitRatio).toBeGreaterThan(0.5);
      // Ratios may move either way: between the two fetches.
      for (const [name, v, pick] of [
        ['hitRatio', shown.hitRatio, (s: Stats): number => s.hitRatio],
        ['offload', shown.offload, (s: Stats): number => s.upstream.offload],
      ] as const) {
        expect(v, name).toBeGreaterThanOrEqual(Math.min(pick(before), pick(after)));
        expect(v, name).toBeLessThanOrEqual(Math.max(pick(before), pick(after)));
      }
      expect(await num(tab, 'memory.entries')).toBe(after.memory.entries);
      expect((await readStat(tab.page, 'memory.maxBytes')).value).toBe(String(after.memory.maxBytes));
      expect(await readStat(tab.page, 'redis.status')).toEqual({ text: 'ok', value: 'ok' });
      expect((await readStat(tab.page, 'upstream.state')).value).toBe(after.upstream.state);
      expect((await readStat(tab.page, 'version')).text).toBe(after.version);
      const rest = (other: Stats, name: string): string[] => (other.requests > 0 || other.upstreamRequests > 0 ? [name] : []);
      expect(shown.operations.map((r) => r.name)).toEqual([
        ...after.top.operations.map((r: Stats) => r.operation),
        ...rest(after.top.otherOperations, 'other operations'),
      ]);
      expect(shown.users.map((r) => r.name)).toEqual([
        ...after.top.users.map((r: Stats) => String(r.userId)),
        ...rest(after.top.otherUsers, 'others (no user yet: identity look-ups, refused credentials)'),
      ]);
      expect(shown.users.length).toBeGreaterThanOrEqual(2);
      // Every upstream request is attributed: each table adds up to the card, and so does what the instance received.
      const upstreamShown = await num(tab, 'upstream.requests');
      const sum = (rows: { values: string[] }[]): number => rows.reduce((n, r) => n + Number(r.values[0]), 0);
      expect(sum(shown.operations)).toBe(upstreamShown);
      expect(sum(shown.users)).toBe(upstreamShown);
      expect(shown.operations.find((r) => r.name === 'identity')?.values[0]).toBe('3');
      expect(upstreamShown).toBe((await emulator.stats()).total - PASSTHROUGH_REQUESTS);

      // Requests per second: the complete buckets of the page's 30 s window, recomputed from a
      // later fetch (complete buckets no longer change).
      const windowed = after.series.filter((b: Stats) => b.t + BUCKET_MS <= shown.rate.to && b.t + BUCKET_MS > shown.rate.to - RATE_WINDOW_MS);
      const total = windowed.reduce((sum: number, b: Stats) => sum + b.requests, 0);
      expect(total).toBeGreaterThan(0);
      expect(shown.rate.value).toBeCloseTo(total / shown.rate.seconds, 9);

      // The chart: one point per complete bucket with cacheable requests, at its hit ratio.
      const points = await tab.page
        .locator('#chart circle.hitRatio')
        .evaluateAll((els) => els.map((el) => ({ t: Number(el.getAttribute('data-t')), value: Number(el.getAttribute('data-value')) })));
      const expected = after.series
        .filter((b: Stats) => b.t + BUCKET_MS <= shown.rate.to && b.requests - b.byOutcome.passthrough > 0)
        .map((b: Stats) => ({ t: b.t, value: (b.byOutcome.hit + b.byOutcome.stale) / (b.requests - b.byOutcome.passthrough) }));
      expect(points.length).toBeGreaterThan(0);
      expect(points).toEqual(expected);

      await tab.page.screenshot({ path: 'test-artifacts/status-page.png', fullPage: true });
      expect(tab.problems()).toEqual([]);
    } finally {
      await tab.close();
    }
  });

  it('shows an error and no figure for a wrong token', async () => {
    const tab = await openTab(browser, `${proxy.managementUrl}/`);
    try {
      await signIn(tab.page, 'not-the-admin-token');
      await tab.page.waitForSelector('body[data-state="unauthorized"]');
      expect(await tab.page.locator('#login-error').textContent()).toContain('401');
      expect(await tab.page.locator('#dashboard').isHidden()).toBe(true);
      expect(await readStat(tab.page, 'hitRatio')).toEqual({ text: '—', value: '' });
      // The only console line is Chromium's own about the refused fetch.
      expect(tab.problems().filter((p) => !p.includes('401'))).toEqual([]);
    } finally {
      await tab.close();
    }
  });
});

describe('a sign-in link opened on a screen that remembers a token', () => {
  it('keeps the remembered token and goes on showing the figures with it when the link token is refused', async () => {
    const saved = await rememberedOn(VIEWER_TOKEN);
    const tab = await openTab(browser, `${proxy.managementUrl}/#token=not-a-token-of-this-instance`, undefined, saved);
    try {
      expect(await settled(tab)).toBe('ok');
      expect(await tab.page.locator('#notice').textContent()).toContain("The sign-in link's token was refused (401)");
      expect(await tab.page.locator('#login').isHidden()).toBe(true);
      expect(tab.page.url()).toBe(`${proxy.managementUrl}/`);
      expect(await keptTokens(tab)).toEqual({ tab: null, device: VIEWER_TOKEN });
      // It goes on polling with the remembered token: a poll after this fetch is shown.
      await waitForPollAfter(tab, await adminStats(VIEWER_TOKEN));
      expect(await num(tab, 'requests.total')).toBeGreaterThan(0);

      // A reload, and a browser restart, still sign in with the remembered token.
      await tab.page.reload();
      await waitForFigures(tab.page);
      expect(await tab.page.locator('#notice').isHidden()).toBe(true);
      expect(await keptTokens(tab)).toEqual({ tab: null, device: VIEWER_TOKEN });
      const restarted = await openTab(browser, `${proxy.managementUrl}/`, undefined, await tab.storageState());
      try {
        await waitForFigures(restarted.page);
      } finally {
        await restarted.close();
      }
      // The refused fetch is the browser's own console line; nothing else.
      expect(tab.problems().filter((p) => !p.includes('401'))).toEqual([]);
    } finally {
      await tab.close();
    }
  });

  it('remembers the link token in place of the remembered one once the server accepts it', async () => {
    const saved = await rememberedOn(VIEWER_TOKEN);
    const tab = await openTab(browser, `${proxy.managementUrl}/#token=${encodeURIComponent(ADMIN_TOKEN)}`, undefined, saved);
    try {
      expect(await settled(tab)).toBe('ok');
      expect(tab.page.url()).toBe(`${proxy.managementUrl}/`);
      expect(await tab.page.locator('#notice').isHidden()).toBe(true);
      expect(await keptTokens(tab)).toEqual({ tab: null, device: ADMIN_TOKEN });
      const restarted = await openTab(browser, `${proxy.managementUrl}/`, undefined, await tab.storageState());
      try {
        await waitForFigures(restarted.page);
        expect(await keptTokens(restarted)).toEqual({ tab: null, device: ADMIN_TOKEN });
      } finally {
        await restarted.close();
      }
      expect(tab.problems()).toEqual([]);
    } finally {
      await tab.close();
    }
  });
});
