/**
 * Refresh-ahead (src/proxy/refresh-ahead.ts), over real HTTP in front of the real emulator,
 * observed from outside: the emulator's request count and the Cache-Status of each answer.
 * - a polled key stays fresh across several freshness periods, with at most one upstream
 *   request per period (the refresh is timed to land just before expiry, not at the first read
 *   in the last part of freshness);
 * - a key no longer read is not refreshed again;
 * - a purge, or an eviction from memory, cancels the refresh a read scheduled;
 * - without a budget token at hand when it is due, it waits for one, last, within
 *   upstream.budget.maxWaitMs, and is skipped when none comes.
 * The bounds are counts; the clock only decides when the client reads.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Config } from '../../src/config/schema.js';
import { startTestEmulator, type TestEmulator } from '../helpers/emulator.js';
import { httpGet, startTestProxy, type DeepPartial, type TestProxy, type TestResponse } from '../helpers/proxy.js';
import { proxyOverEmulator } from '../helpers/setup.js';
import { until } from '../helpers/wait.js';

/** A page past the project's runs: an empty list, the same size whatever the page number (3 digits). */
const page = (project: number, n: number): string => `/api/v1/projects/${project}/runs?per_page=25&page=${n}`;
const ADMIN_TOKEN = 'admin-token-for-refresh-ahead-0123456789';
/** refresh-ahead.ts MAX_LEAD_SHARE: a refresh starts at least this much of its freshness after the answer it replaces was stored. */
const LEAST_CYCLE_SHARE = 0.9;

const freshFor = (ttlMs: number): DeepPartial<Config> => ({
  // No stale-while-revalidate: a refresh landing late would make a poll wait (not a hit).
  // No derived answers: these pages past the last of one list would answer each other (a derivable
  // answer is not refreshed ahead; test/proxy/derived-*.test.ts cover derivation).
  cache: { freshness: { default: { ttlMs, staleWhileRevalidateMs: 0 } }, refreshAhead: { enabled: true, startAt: 0.75 }, derive: { enabled: false } },
});

const upstreamTotal = async (em: TestEmulator): Promise<number> => (await em.stats()).total;
const expectHit = (res: TestResponse): void => expect(res.headers['cache-status']).toMatch(/; hit/);

/** Fills `path` for `token`; answers when the fill was asked (before its answer was stored). */
async function fill(p: TestProxy, path: string, token: string): Promise<number> {
  const filledAt = Date.now();
  const res = await p.get(path, token);
  expect(res.status).toBe(200);
  expect(res.headers['cache-status']).toMatch(/fwd=uri-miss/);
  return filledAt;
}

describe('refresh-ahead of a polled key', () => {
  const TTL_MS = 2_000;
  const env = proxyOverEmulator({ ...freshFor(TTL_MS), admin: { token: ADMIN_TOKEN } });

  it('keeps every poll a hit across several freshness periods, with at most one upstream request per period', async () => {
    const member = env.emulator.tokens.member(0);
    const path = page(member.project_ids[0]!, 101);
    const filledAt = await fill(env.proxy, path, member.token);
    await env.emulator.resetStats();
    // Polled every 100 ms for four freshness periods.
    const polls: TestResponse[] = [];
    while (Date.now() < filledAt + 4 * TTL_MS) {
      polls.push(await env.proxy.get(path, member.token));
      await sleep(100);
    }
    const elapsedMs = Date.now() - filledAt;
    for (const res of polls) expectHit(res);
    const refreshes = await upstreamTotal(env.emulator);
    // Refreshed in every period (the first fill's answer lasted one)...
    expect(refreshes).toBeGreaterThanOrEqual(3);
    // ...and each refresh replaced an answer at least 0.9 of its freshness old: at most one per period.
    expect(refreshes).toBeLessThanOrEqual(Math.floor(elapsedMs / (LEAST_CYCLE_SHARE * TTL_MS)));
  });

  it('does not refresh again a key no longer polled (read only early in its freshness)', async () => {
    const member = env.emulator.tokens.member(0);
    const path = page(member.project_ids[0]!, 102);
    await fill(env.proxy, path, member.token);
    await env.emulator.resetStats();
    // Polled until its refresh was asked, then read once early in the new answer's freshness.
    await until(async () => {
      expectHit(await env.proxy.get(path, member.token));
      await sleep(100);
      return (await upstreamTotal(env.emulator)) >= 1;
    }, 2 * TTL_MS);
    await sleep(200);
    expectHit(await env.proxy.get(path, member.token));
    await sleep(2.5 * TTL_MS);
    expect(await upstreamTotal(env.emulator)).toBe(1);
  });

  it('cancels the refresh a read scheduled when the entry is purged', async () => {
    const member = env.emulator.tokens.member(0);
    const project = member.project_ids[0]!;
    const path = page(project, 103);
    const filledAt = await fill(env.proxy, path, member.token);
    await env.emulator.resetStats();
    // A read in the last quarter of the freshness (the refresh is due only shortly before expiry)...
    await sleep(filledAt + 0.8 * TTL_MS - Date.now());
    expectHit(await env.proxy.get(path, member.token));
    // ...then the answer purged: the refresh, when due, finds nothing to refresh.
    const purged = await request(`${env.proxy.managementUrl}/admin/purge`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ tag: `project:${project}` }),
    });
    expect(purged.statusCode).toBe(200);
    await purged.body.dump();
    await sleep(filledAt + 1.5 * TTL_MS - Date.now());
    expect(await upstreamTotal(env.emulator)).toBe(0);
  });
});

describe('refresh-ahead of an entry evicted from memory', () => {
  const TTL_MS = 2_000;
  let emulator: TestEmulator;
  let proxy: TestProxy;
  beforeAll(async () => {
    emulator = await startTestEmulator();
    const member = emulator.tokens.member(0);
    // Memory for two entries of the size of these pages: a third evicts the least recently used.
    const bodyBytes = (await httpGet(emulator.url + page(member.project_ids[0]!, 200), member.token)).body.length;
    const maxBytes = Math.floor(2.5 * (bodyBytes + 1024));
    proxy = await startTestProxy(emulator.url, { ...freshFor(TTL_MS), cache: { ...freshFor(TTL_MS).cache, memory: { maxBytes, maxEntryBytes: maxBytes } } });
  });
  afterAll(async () => {
    await proxy?.close();
    await emulator?.close();
  });

  it('cancels the refresh a read scheduled when the entry is evicted', async () => {
    const member = emulator.tokens.member(0);
    const project = member.project_ids[0]!;
    const filledAt = await fill(proxy, page(project, 201), member.token);
    await emulator.resetStats();
    await sleep(filledAt + 0.8 * TTL_MS - Date.now());
    expectHit(await proxy.get(page(project, 201), member.token));
    // Two other answers of the same size: the polled one, least recently used, is evicted.
    await fill(proxy, page(project, 202), member.token);
    await fill(proxy, page(project, 203), member.token);
    const held = proxy.cache.memory.list(() => true, 10).entries.map((e) => e.key);
    expect(held).toHaveLength(2);
    expect(held.join(' ')).not.toContain('page=201');
    await sleep(filledAt + 1.5 * TTL_MS - Date.now());
    // The two fills, and no refresh.
    expect(await upstreamTotal(emulator)).toBe(2);
  });
});

describe('refresh-ahead without a budget token at hand', () => {
  const TTL_MS = 2_000;
  // None at hand when the refresh is due: at 0.5 req/s and a burst of 2, the identity look-up and
  // the fill take both, and the next comes about 2 s after; at 0.2 req/s and a burst of 3, a
  // second fill takes the third, and the next comes about 5 s after.
  const budget = (requestsPerSecond: number, burst: number, maxWaitMs: number): DeepPartial<Config> => ({
    ...freshFor(TTL_MS),
    upstream: { budget: { requestsPerSecond, burst, maxWaitMs } },
  });

  /** Fills the page, reads it once past startAt of its freshness (counted from its answer), and counts what reaches the instance until 1.6 TTL after. */
  async function refreshesAfterOneLateRead(env: { emulator: TestEmulator; proxy: TestProxy }, n: number, fills = 1): Promise<number> {
    const member = env.emulator.tokens.member(0);
    const path = page(member.project_ids[0]!, n);
    for (let k = 1; k < fills; k++) await fill(env.proxy, page(member.project_ids[0]!, n + 100 * k), member.token);
    await fill(env.proxy, path, member.token);
    const answeredAt = Date.now(); // the entry was stored before this: its freshness is at least this far along
    await env.emulator.resetStats();
    await sleep(answeredAt + 0.8 * TTL_MS - Date.now());
    expectHit(await env.proxy.get(path, member.token));
    await sleep(answeredAt + 1.6 * TTL_MS - Date.now());
    return upstreamTotal(env.emulator);
  }

  describe('waiting within upstream.budget.maxWaitMs', () => {
    const env = proxyOverEmulator(budget(0.5, 2, 10_000));
    it('waits for the next token, behind every request a client waits for, and is sent', async () => {
      expect(await refreshesAfterOneLateRead(env, 301)).toBe(1);
    });
  });

  describe('with no token within upstream.budget.maxWaitMs', () => {
    const env = proxyOverEmulator(budget(0.2, 3, 300));
    it('is skipped: nothing is sent, and a later read may try again', async () => {
      expect(await refreshesAfterOneLateRead(env, 302, 2)).toBe(0);
    });
  });
});
