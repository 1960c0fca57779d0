/**
 * The status page's Budget card, in a real headless Chromium, against a real tm-cache (memory
 * only: the budget is this replica's own) in front of the real emulator: the mode and the rate
 * against its configured ceiling, then, after the instance answers 429 with a Retry-After, the
 * pause with its reason and the client refusals it causes, as /admin/stats gives them.
 */
import { mkdirSync } from 'node:fs';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchChromium, openTab, readStat, signIn, waitForFigures } from '../helpers/chromium.js';
import { startTestEmulator, type TestEmulator } from '../helpers/emulator.js';
import { httpGet, startTestProxy, type TestProxy } from '../helpers/proxy.js';
import { until } from '../helpers/wait.js';

const ADMIN_TOKEN = 'status-page-budget-test-admin-token-5e21c8';
const BUDGET_RPS = 40;
const RETRY_AFTER_S = 30;

let emulator: TestEmulator;
let proxy: TestProxy;
let browser: Browser;

async function budgetStats(): Promise<any> {
  const res = await httpGet(`${proxy.managementUrl}/admin/stats`, ADMIN_TOKEN);
  expect(res.status).toBe(200);
  return (res.json() as any).upstream.budget;
}

beforeAll(async () => {
  emulator = await startTestEmulator();
  proxy = await startTestProxy(emulator.url, { admin: { token: ADMIN_TOKEN }, upstream: { budget: { requestsPerSecond: BUDGET_RPS } } });
  browser = await launchChromium();
});

afterAll(async () => {
  await browser?.close();
  await proxy?.close();
  await emulator?.close();
});

describe("the status page's Budget card", () => {
  it('shows the mode and the rate against its ceiling, then the pause a 429 caused and why', { timeout: 60_000 }, async () => {
    const [member, other] = [emulator.tokens.member(0), emulator.tokens.member(1)];
    const projectId = member.project_ids[0]!;
    expect((await proxy.get(`/api/v1/projects/${projectId}`, member.token)).status).toBe(200);
    expect((await proxy.get(`/api/v1/projects/${other.project_ids[0]}`, other.token)).status).toBe(200);

    const quiet = await budgetStats();
    expect(quiet).toMatchObject({ mode: 'local', rate: 'fixed', rateRps: BUDGET_RPS, ceilingRps: BUDGET_RPS, pausedMs: 0, pause: null, waiting: 0 });
    expect(quiet.queued).toEqual({ client: 0, unverified: 0, background: 0, ahead: 0 });
    expect(quiet.lastMinutePerSecond).toEqual({ refused: 0, stale: 0, skipped: 0 });

    const tab = await openTab(browser, `${proxy.managementUrl}/`);
    try {
      await signIn(tab.page, ADMIN_TOKEN);
      await waitForFigures(tab.page);
      expect(await readStat(tab.page, 'budget.mode')).toEqual({ text: 'local', value: 'local' });
      expect(await readStat(tab.page, 'budget.rate')).toEqual({ text: `${BUDGET_RPS} / ${BUDGET_RPS}`, value: String(BUDGET_RPS) });
      expect((await readStat(tab.page, 'budget.kind')).text).toBe('fixed');
      expect((await readStat(tab.page, 'budget.pause')).text).toBe('no');
      expect((await readStat(tab.page, 'budget.waiting')).text).toBe('0 (client 0 · unverified 0 · background 0 · ahead 0)');

      // The instance refuses: the fleet pauses for its Retry-After, and the next miss is refused by the budget.
      await emulator.faults({ rate_limit: { after_n: 0, retry_after_s: RETRY_AFTER_S } });
      try {
        expect((await proxy.get(`/api/v1/projects/${projectId}/runs?per_page=50`, member.token)).status).toBe(429);
      } finally {
        await emulator.clearFaults();
      }
      // Another caller (the first is held back by its own Retry-After): refused by the budget.
      expect((await proxy.get(`/api/v1/projects/${other.project_ids[0]}/milestones`, other.token)).status).toBe(429);

      // The refusal is recorded as its response ends: read once it is counted.
      await until(async () => (await budgetStats()).refused === 1);
      const paused = await budgetStats();
      expect(paused.pausedMs).toBeGreaterThan(25_000);
      expect(paused.pause).toMatchObject({ from: 'this-replica', retryAfterMs: RETRY_AFTER_S * 1_000 });
      const [since, pausedUntil] = [Date.parse(paused.pause.since), Date.parse(paused.pause.until)];
      expect(pausedUntil - since).toBeGreaterThanOrEqual(RETRY_AFTER_S * 1_000 - 1_000);
      expect(pausedUntil - since).toBeLessThanOrEqual(RETRY_AFTER_S * 1_000 + 1_000);
      expect(paused.lastMinutePerSecond.refused).toBeGreaterThan(0);
      expect(paused.refused).toBe(1);

      await until(async () => (await readStat(tab.page, 'budget.pause')).text !== 'no', 10_000);
      const pause = await readStat(tab.page, 'budget.pause');
      expect(pause.text).toMatch(/^until \d\d:\d\d:\d\d \(Retry-After 30 s\)$/);
      // Until when, as a later fetch gives it (from the wall clock and the pause left: a few ms of jitter).
      expect(Math.abs(Date.parse(pause.value) - pausedUntil)).toBeLessThan(1_000);
      expect(Number((await readStat(tab.page, 'budget.refusedPerS')).value)).toBeGreaterThan(0);
      mkdirSync('test-artifacts', { recursive: true });
      await tab.page.locator('#budget-card').screenshot({ path: 'test-artifacts/status-page-budget.png' });
      expect(tab.problems()).toEqual([]);
    } finally {
      await tab.close();
    }
  });
});
