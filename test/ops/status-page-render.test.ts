/**
 * The status page in a real headless Chromium against a fixture stats JSON (see
 * test/helpers/chromium.ts): what the real admin API cannot be made to answer on purpose — a
 * known series to check the chart and the rates against, hostile strings, a rotated token, the
 * admin API switched off — all under the page's real Content-Security-Policy.
 * test/ops/status-page.test.ts runs it against a real tm-cache with real traffic.
 */
import { mkdirSync } from 'node:fs';
import type { Browser } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { STATUS_PAGE_CSP, STATUS_PAGE_HEADERS, STATUS_PAGE_HTML } from '../../src/ops/status-page.js';
import {
  launchChromium,
  openTab,
  readStat,
  readTopTable,
  signIn,
  startStatsFixture,
  waitForFigures,
  type StatsFixture,
  type StorageState,
  type Tab,
} from '../helpers/chromium.js';

const TOKEN = 'fixture-admin-token';
const BUCKET_MS = 10_000;
const END = 1_800_000_000_000; // start of the current (partial) bucket
const t = (bucketsAgo: number) => END - bucketsAgo * BUCKET_MS;

type Outcomes = Partial<Record<'hit' | 'stale' | 'miss' | 'coalesced' | 'bypass' | 'error' | 'passthrough', number>>;
function bucket(tMs: number, outcomes: Outcomes, upstream: number) {
  const byOutcome = { hit: 0, stale: 0, miss: 0, coalesced: 0, bypass: 0, error: 0, passthrough: 0, ...outcomes };
  return { t: tMs, requests: Object.values(byOutcome).reduce((a, b) => a + b, 0), byOutcome, upstream };
}

/**
 * Six complete buckets and the partial one. Per bucket: hit ratio = (hit+stale)/(requests -
 * passthrough), offload = 1 - upstream/(requests - passthrough).
 */
const SERIES = [
  bucket(t(6), { hit: 6, miss: 4 }, 4), //                          0.6, 0.6
  bucket(t(5), { hit: 15, stale: 1, miss: 2, coalesced: 2 }, 2), //   0.8, 0.9
  bucket(t(4), { passthrough: 4 }, 4), //                           nothing cacheable: a gap
  // t(3) missing: a quiet bucket, another gap
  bucket(t(2), { hit: 10, bypass: 0, passthrough: 2 }, 3), //       1.0, 0.7
  bucket(t(1), { hit: 27, miss: 3 }, 3), //                         0.9, 0.9
  bucket(t(0), { miss: 1000 }, 1000), //                            partial: neither drawn nor in the rates
];

function makeStats(overrides: Record<string, unknown> = {}) {
  return {
    version: '0.1.0',
    node: 'v20.20.2',
    startedAt: t(60),
    now: END + 4_000,
    uptimeS: 604,
    requests: {
      total: 1234567,
      byOutcome: { hit: 1000000, stale: 1000, miss: 200000, coalesced: 500, bypass: 67, error: 0, passthrough: 33000 },
      byTier: { memory: 990000, redis: 11000, none: 233567 },
    },
    hitRatio: 0.8333,
    upstream: {
      requests: 234000,
      avoided: 967567,
      offload: 0.805,
      byStatusClass: { '2xx': 233000, '3xx': 0, '4xx': 900, '429': 7, '5xx': 93, error: 0 },
      state: 'up',
      lastError: null,
      lastCheckedAt: END + 3_000,
      last429At: END - 45_000,
      recent429: 7,
      active: 3,
      queued: 1,
      budget: {
        mode: 'shared',
        rateRps: 12.5,
        pausedMs: 41_200,
        queued: { client: 2, background: 0, ahead: 0 },
        tokens: 900,
        waits: 30,
        spent: 4,
        deferredToStale: 3,
        refused: 1,
        pauses: 2,
      },
    },
    bytes: { sent: 5 * 1024 * 1024 * 1024, savedBy304: 1536 },
    memory: { entries: 4321, bytes: 100 * 1024 * 1024, maxBytes: 256 * 1024 * 1024, evictions: 12 },
    redis: { configured: true, status: 'ok', detail: null, errors: 0 },
    top: {
      operations: [
        { operation: 'listRuns', upstreamRequests: 120000, requests: 600000 },
        { operation: 'getCase', upstreamRequests: 80000, requests: 400000 },
      ],
      users: [{ userId: 7, upstreamRequests: 150000, requests: 700000 }],
    },
    series: SERIES,
    ...overrides,
  };
}

let browser: Browser;
let fixture: StatsFixture;
const tabs: Tab[] = [];

async function open(url = `${fixture.url}/`, viewport?: { width: number; height: number }, storageState?: StorageState): Promise<Tab> {
  const tab = await openTab(browser, url, viewport, storageState);
  tabs.push(tab);
  return tab;
}

beforeAll(async () => {
  browser = await launchChromium();
  fixture = await startStatsFixture(TOKEN, makeStats());
  mkdirSync('test-artifacts', { recursive: true });
});

afterEach(async () => {
  fixture.setToken(TOKEN);
  fixture.setFailure(null);
  fixture.setStats(makeStats());
  await Promise.all(tabs.splice(0).map((tab) => tab.close()));
});

afterAll(async () => {
  await browser?.close();
  await fixture?.close();
});

describe('the status page under its Content-Security-Policy', () => {
  it('allows exactly its inline script and style, by hash, and nothing from elsewhere', () => {
    expect(STATUS_PAGE_HEADERS['content-security-policy']).toBe(STATUS_PAGE_CSP);
    expect(STATUS_PAGE_CSP).not.toContain('unsafe');
    expect(STATUS_PAGE_CSP).toMatch(
      /^default-src 'none'; script-src 'sha256-[A-Za-z0-9+/]{43}='; style-src 'sha256-[A-Za-z0-9+/]{43}='; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'$/,
    );
    expect(STATUS_PAGE_HTML.match(/<script/g)).toHaveLength(1);
    expect(STATUS_PAGE_HTML.match(/<style/g)).toHaveLength(1);
    // No style attribute, no inline handler, no resource but the data: favicon, no @import or url().
    expect(STATUS_PAGE_HTML).not.toMatch(/ style=| on[a-z]+=|@import|url\(/);
    expect(STATUS_PAGE_HTML.match(/ (src|href)=("[^"]*"|\S+)/g)).toEqual([' href="data:,"']);
  });

  it('shows every figure with no console error and no CSP violation', async () => {
    const tab = await open();
    await signIn(tab.page, TOKEN);
    await waitForFigures(tab.page);
    expect(await readStat(tab.page, 'hitRatio')).toEqual({ text: '83.3 %', value: '0.8333' });
    expect(await readStat(tab.page, 'offload')).toEqual({ text: '80.5 %', value: '0.805' });
    expect(await readStat(tab.page, 'requests.total')).toEqual({ text: '1.23 M', value: '1234567' });
    expect(await readStat(tab.page, 'upstream.requests')).toEqual({ text: '234 k', value: '234000' });
    expect((await readStat(tab.page, 'bytes.sent')).text).toBe('5.00 GiB');
    expect((await readStat(tab.page, 'bytes.savedBy304')).text).toBe('1.50 KiB');
    expect((await readStat(tab.page, 'memory.maxBytes')).text).toBe('256.0 MiB');
    expect((await readStat(tab.page, 'memory.entries')).text).toBe('4.32 k');
    expect(await readStat(tab.page, 'redis.status')).toEqual({ text: 'ok', value: 'ok' });
    expect(await readStat(tab.page, 'upstream.state')).toEqual({ text: 'up', value: 'up' });
    expect(await readStat(tab.page, 'upstream.recent429')).toEqual({ text: '7', value: '7' });
    expect((await readStat(tab.page, 'upstream.last429At')).text).toBe('49 s ago');
    expect((await readStat(tab.page, 'upstream.byStatusClass.429')).value).toBe('7');
    // The fleet's budget: its rate, where tokens come from, the pause left after a 429, what it deferred.
    expect(await readStat(tab.page, 'upstream.budget.rateRps')).toEqual({ text: '12.5', value: '12.5' });
    expect(await readStat(tab.page, 'upstream.budget.mode')).toEqual({ text: 'shared', value: 'shared' });
    expect(await readStat(tab.page, 'upstream.budget.paused')).toEqual({ text: '42 s', value: '41200' });
    expect((await readStat(tab.page, 'upstream.budget.deferredToStale')).text).toBe('3');
    expect((await readStat(tab.page, 'upstream.budget.refused')).text).toBe('1');
    expect((await readStat(tab.page, 'uptimeS')).text).toBe('10 min 4 s');
    expect((await readStat(tab.page, 'version')).text).toBe('0.1.0');
    expect(await readTopTable(tab.page, 'top.operations')).toEqual([
      { name: 'listRuns', values: ['120000', '600000', '0.8'] },
      { name: 'getCase', values: ['80000', '400000', '0.8'] },
    ]);
    expect(await readTopTable(tab.page, 'top.users')).toEqual([{ name: '7', values: ['150000', '700000', String(1 - 150000 / 700000)] }]);
    await tab.page.screenshot({ path: 'test-artifacts/status-page-fixture.png', fullPage: true });
    expect(tab.problems()).toEqual([]);
  });

  it('is caught when the CSP does not allow its script: the figures stay empty and the violation is reported', async () => {
    const wrongCsp = STATUS_PAGE_CSP.replace(/script-src '[^']+'/, "script-src 'sha256-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA='");
    const broken = await startStatsFixture(TOKEN, makeStats(), { ...STATUS_PAGE_HEADERS, 'content-security-policy': wrongCsp });
    try {
      const tab = await open(`${broken.url}/`);
      await tab.page.waitForTimeout(300); // nothing to wait for: the script never runs
      expect(await tab.page.locator('#login').isHidden()).toBe(true); // the script shows it
      expect(await readStat(tab.page, 'hitRatio')).toEqual({ text: '—', value: '' });
      expect(tab.problems().some((p) => p.startsWith('csp: script-src'))).toBe(true);
    } finally {
      await broken.close();
    }
  });
});

describe('the chart and the rates', () => {
  it('draws one point per complete bucket with cacheable requests, breaks the line at gaps, leaves out the partial bucket', async () => {
    const tab = await open();
    await signIn(tab.page, TOKEN);
    await waitForFigures(tab.page);
    const points = await tab.page
      .locator('#chart circle')
      .evaluateAll((els) =>
        els.map((el) => ({ series: el.getAttribute('data-series'), t: Number(el.getAttribute('data-t')), value: Number(el.getAttribute('data-value')) })),
      );
    const bySeries = (name: string) => points.filter((p) => p.series === name).map((p) => [p.t, Number(p.value.toFixed(6))]);
    expect(bySeries('hitRatio')).toEqual([
      [t(6), 0.6],
      [t(5), 0.8],
      [t(2), 1],
      [t(1), 0.9],
    ]);
    expect(bySeries('offload')).toEqual([
      [t(6), 0.6],
      [t(5), 0.9],
      [t(2), 0.7],
      [t(1), 0.9],
    ]);
    // Two runs of two points each: M L M L.
    const path = await tab.page.locator('#chart path.hitRatio').getAttribute('d');
    expect(path?.match(/[ML]/g)).toEqual(['M', 'L', 'M', 'L']);
    // A point's height is its value: 100 % sits higher than 60 %.
    const cy = async (tMs: number) => Number(await tab.page.locator(`#chart circle.hitRatio[data-t="${tMs}"]`).getAttribute('cy'));
    expect(await cy(t(2))).toBeLessThan(await cy(t(6)));
    expect(await tab.page.locator('#chart').getAttribute('aria-label')).toContain('latest hit ratio 90.0 %');
  });

  it('stacks requests per second by outcome per bucket, with upstream requests per second as a line', async () => {
    const tab = await open();
    await signIn(tab.page, TOKEN);
    await waitForFigures(tab.page);
    const bars = await tab.page
      .locator('#rate-chart rect')
      .evaluateAll((els) => els.map((el) => [Number(el.getAttribute('data-t')), el.getAttribute('class'), Number(el.getAttribute('data-value'))]));
    expect(bars).toEqual([
      [t(6), 'bar cache', 0.6],
      [t(6), 'bar miss', 0.4],
      [t(5), 'bar cache', 1.6],
      [t(5), 'bar coalesced', 0.2],
      [t(5), 'bar miss', 0.2],
      [t(4), 'bar passthrough', 0.4],
      [t(2), 'bar cache', 1],
      [t(2), 'bar passthrough', 0.2],
      [t(1), 'bar cache', 2.7],
      [t(1), 'bar miss', 0.3],
    ]);
    // The tallest bar (3/s) sets the scale: 5/s at the top.
    expect(await tab.page.locator('#rate-chart text').allTextContents()).toEqual(expect.arrayContaining(['0/s', '2.5/s', '5/s']));
    // Upstream: t(6), t(5), t(4) in a run, t(3) missing, then t(2), t(1).
    expect((await tab.page.locator('#rate-chart path.upstream').getAttribute('d'))?.match(/[ML]/g)).toEqual(['M', 'L', 'L', 'M', 'L']);
  });

  it('gives requests per second over the complete buckets of the last 30 s', async () => {
    const tab = await open();
    await signIn(tab.page, TOKEN);
    await waitForFigures(tab.page);
    // t(3) (absent), t(2) and t(1): 12 + 30 requests in 30 s; the partial t(0) is left out.
    expect(await readStat(tab.page, 'rate.total')).toEqual({ text: '1.40 /s', value: String(42 / 30) });
    expect((await readStat(tab.page, 'rate.hit')).value).toBe(String(37 / 30));
    expect((await readStat(tab.page, 'rate.passthrough')).value).toBe(String(2 / 30));
    expect((await readStat(tab.page, 'rate.miss')).value).toBe(String(3 / 30));
    expect(await tab.page.locator('[data-stat="rate.total"]').first().getAttribute('data-seconds')).toBe('30');
  });

  it('says so when no bucket is complete yet', async () => {
    fixture.setStats(makeStats({ startedAt: END + 1_000, uptimeS: 3, series: [bucket(END, { miss: 3 }, 3)] }));
    const tab = await open();
    await signIn(tab.page, TOKEN);
    await waitForFigures(tab.page);
    expect(await tab.page.locator('#chart circle, #rate-chart rect').count()).toBe(0);
    expect(await tab.page.locator('#rate-chart-empty').textContent()).toContain('No complete 10-second bucket');
    expect(await tab.page.locator('#chart-empty').textContent()).toContain('No complete 10-second bucket');
    expect(await readStat(tab.page, 'rate.total')).toEqual({ text: '—', value: '' });
  });
});

describe('strings from the JSON', () => {
  it('are shown as text, never parsed as HTML', async () => {
    const hostile = '<img src=x onerror=alert(1)>';
    const closing = '</script><script>alert(2)</script>&amp;';
    fixture.setStats(
      makeStats({
        version: closing,
        upstream: { ...makeStats().upstream, state: 'down', lastError: hostile },
        redis: { configured: true, status: 'degraded', detail: `"><svg onload=alert(3)>`, errors: 2 },
        top: { operations: [{ operation: hostile, upstreamRequests: 5, requests: 6 }], users: [{ userId: '<b>7</b>', upstreamRequests: 1, requests: 2 }] },
      }),
    );
    const tab = await open();
    await signIn(tab.page, TOKEN);
    await waitForFigures(tab.page);
    expect((await readStat(tab.page, 'upstream.lastError')).text).toBe(hostile);
    expect((await readStat(tab.page, 'version')).text).toBe(closing);
    expect((await readStat(tab.page, 'redis.detail')).text).toBe(`"><svg onload=alert(3)>`);
    expect(await readTopTable(tab.page, 'top.operations')).toEqual([{ name: hostile, values: ['5', '6', String(1 - 5 / 6)] }]);
    expect((await readTopTable(tab.page, 'top.users'))[0]?.name).toBe('<b>7</b>');
    expect(await tab.page.locator('img, b, main script, #dashboard svg:not(.chart)').count()).toBe(0);
    expect(await readStat(tab.page, 'upstream.state')).toEqual({ text: 'down', value: 'down' });
    expect(await tab.page.locator('[data-stat="upstream.state"]').first().getAttribute('class')).toBe('state-down');
    expect(tab.problems()).toEqual([]); // no alert() dialog
  });
});

describe('the admin token', () => {
  it('is asked for again after a 401, and kept only in this tab', async () => {
    const tab = await open();
    await signIn(tab.page, 'not-the-token');
    await tab.page.waitForSelector('body[data-state="unauthorized"]');
    expect(await tab.page.locator('#login-error').textContent()).toContain('401');
    expect(await tab.page.locator('#dashboard').isHidden()).toBe(true);
    expect(await tab.page.evaluate('sessionStorage.length')).toBe(0);

    await signIn(tab.page, TOKEN);
    await waitForFigures(tab.page);
    expect(await tab.page.locator('#login').isHidden()).toBe(true);
    // A reload keeps the session's token; a new tab (a new context) starts at the form.
    await tab.page.reload();
    await waitForFigures(tab.page);
    const other = await open();
    expect(await other.page.getAttribute('body', 'data-state')).toBe('login');

    // The operator rotates the token: the next poll gets a 401 and the page asks again.
    fixture.setToken('rotated');
    await tab.page.waitForSelector('body[data-state="unauthorized"]', { timeout: 10_000 });
    expect(await tab.page.locator('#login').isVisible()).toBe(true);
    // The 401s are the browser's own console lines about a failed fetch; nothing else.
    expect(tab.problems().filter((p) => !p.includes('401'))).toEqual([]);
  });

  it("signs in from a link's #token= fragment, read once and removed from the address bar, never sent to the server", async () => {
    const tab = await open(`${fixture.url}/#token=${encodeURIComponent(TOKEN)}`);
    await waitForFigures(tab.page);
    expect(tab.page.url()).toBe(`${fixture.url}/`);
    expect(await tab.page.evaluate('location.hash')).toBe('');
    // Kept in this tab only, as a typed token is by default.
    expect(await tab.page.evaluate(`sessionStorage.getItem('tm-cache.adminToken')`)).toBe(TOKEN);
    expect(await tab.page.evaluate('localStorage.length')).toBe(0);
    expect(fixture.requestTargets().filter((target) => target.includes(TOKEN))).toEqual([]);
    // A reload finds no fragment any more, and the session's token still signs in.
    await tab.page.reload();
    await waitForFigures(tab.page);
    expect(tab.problems()).toEqual([]);
  });

  it("brings the form back, saying the link's token was refused, when the tab has no token to go on with", async () => {
    const tab = await open(`${fixture.url}/#token=not-the-token`);
    await tab.page.waitForSelector('body[data-state="unauthorized"]');
    expect(await tab.page.locator('#login-error').textContent()).toContain("The sign-in link's token was refused (401)");
    expect(await tab.page.evaluate('location.hash')).toBe('');
    expect(await tab.page.evaluate('sessionStorage.length + localStorage.length')).toBe(0);
    expect(tab.problems().filter((p) => !p.includes('401'))).toEqual([]);
  });

  it("reads a link's token put into an open tab's address bar, and keeps the tab's token when it is refused", async () => {
    const tab = await open();
    await signIn(tab.page, TOKEN);
    await waitForFigures(tab.page);
    // A fragment changed in place loads nothing: the page reads it when it changes.
    await tab.page.evaluate(`location.hash = '#token=not-the-token'`);
    await tab.page.locator('#notice').waitFor({ state: 'visible' });
    expect(await tab.page.locator('#notice').textContent()).toContain("The sign-in link's token was refused (401)");
    expect(await tab.page.evaluate('location.hash')).toBe('');
    expect(await tab.page.evaluate(`sessionStorage.getItem('tm-cache.adminToken')`)).toBe(TOKEN);
    await waitForFigures(tab.page);
    expect(await tab.page.locator('#login').isHidden()).toBe(true);
  });

  it('stays signed in across a browser restart only when "Remember on this device" is ticked', async () => {
    const once = await open();
    await signIn(once.page, TOKEN);
    await waitForFigures(once.page);
    // A restarted browser keeps cookies and localStorage, never sessionStorage: the form again.
    const restarted = await open(undefined, undefined, await once.storageState());
    expect(await restarted.page.getAttribute('body', 'data-state')).toBe('login');

    const remembered = await open();
    await signIn(remembered.page, TOKEN, true);
    await waitForFigures(remembered.page);
    expect(await remembered.page.evaluate('sessionStorage.length')).toBe(0);
    const saved = await remembered.storageState();
    const wall = await open(undefined, undefined, saved);
    await waitForFigures(wall.page);
    expect(await wall.page.locator('#login').isHidden()).toBe(true);

    // "Forget token" forgets it on the device too: the next start asks again.
    await wall.page.getByRole('button', { name: 'Forget token' }).click();
    await wall.page.waitForSelector('body[data-state="login"]');
    const afterForget = await open(undefined, undefined, await wall.storageState());
    expect(await afterForget.page.getAttribute('body', 'data-state')).toBe('login');
    expect(wall.problems()).toEqual([]);
  });

  it('explains what the token is, where it comes from and where it is kept', async () => {
    const tab = await open();
    const login = (await tab.page.locator('#login').textContent()) ?? '';
    for (const words of ['admin.token', 'TM_CACHE_ADMIN_TOKEN', 'admin.viewerToken', 'read-only', 'sessionStorage', 'localStorage', 'tm-cache demo']) {
      expect(login).toContain(words);
    }
  });

  it('keeps the last figures and says so while /admin/stats fails, and recovers', async () => {
    const tab = await open();
    await signIn(tab.page, TOKEN);
    await waitForFigures(tab.page);
    fixture.setFailure(500);
    await tab.page.waitForSelector('body[data-state="error"]', { timeout: 10_000 });
    expect(await tab.page.locator('#banner').textContent()).toMatch(/^Cannot read \/admin\/stats: HTTP 500\. Showing the figures of \d\d:\d\d:\d\d\./);
    expect((await readStat(tab.page, 'hitRatio')).value).toBe('0.8333');
    fixture.setFailure(null);
    fixture.setStats(makeStats({ hitRatio: 0.5 }));
    await waitForFigures(tab.page);
    expect(await tab.page.locator('#banner').isHidden()).toBe(true);
    expect((await readStat(tab.page, 'hitRatio')).value).toBe('0.5');
  });

  it('says how to turn the admin API on when it is off (404)', async () => {
    fixture.setToken(null);
    const tab = await open();
    await signIn(tab.page, 'anything');
    await tab.page.waitForSelector('body[data-state="disabled"]');
    expect(await tab.page.locator('#banner').textContent()).toContain('admin.token');
  });
});

describe('at a narrow width', () => {
  it('fits without horizontal scrolling', async () => {
    const tab = await open(undefined, { width: 390, height: 844 });
    await signIn(tab.page, TOKEN);
    await waitForFigures(tab.page);
    const scrollWidth = await tab.page.evaluate<number>('document.documentElement.scrollWidth');
    const clientWidth = await tab.page.evaluate<number>('document.documentElement.clientWidth');
    expect(scrollWidth).toBeLessThanOrEqual(clientWidth);
    expect(await tab.page.locator('#chart circle').count()).toBe(8);
    await tab.page.screenshot({ path: 'test-artifacts/status-page-narrow.png', fullPage: true });
  });
});
