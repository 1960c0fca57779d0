/**
 * The rate_limit fault's token bucket and lockout, and the stats that show them, over real HTTP
 * against an emulator whose wall clock the test holds: rates, windows and lockouts are stepped
 * exactly, never slept through.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startEmulator, type RunningEmulator } from '../../src/emulator/server.js';
import { call, get, type Answer } from './http.js';

let em: RunningEmulator;
let admin: string;
let nowMs = 1_700_000_000_000;
const advance = (ms: number) => void (nowMs += ms);

beforeAll(async () => {
  em = await startEmulator({ host: '127.0.0.1', port: 0, seed: 42, scale: 'small', nowMs: () => nowMs });
  admin = (await get(`${em.url}/__emulator/tokens`)).json().find((t: any) => t.is_admin).token;
});
afterAll(() => em?.close());
beforeEach(async () => {
  await control('DELETE', '/faults');
  await control('POST', '/stats/reset');
});

async function control(method: string, path: string, body?: unknown): Promise<Answer> {
  return call(`${em.url}/__emulator${path}`, body === undefined ? { method } : { method, body: JSON.stringify(body) });
}

async function setFaults(faults: unknown): Promise<void> {
  const a = await control('PUT', '/faults', faults);
  expect(a.status, a.text).toBe(200);
}

const stats = async () => (await control('GET', '/stats')).json();
const user = () => get(`${em.url}/api/v1/user`, admin);

/** `n` concurrent requests at the current instant: their statuses, sorted. */
async function statuses(n: number): Promise<number[]> {
  return (await Promise.all(Array.from({ length: n }, user))).map((a) => a.status).sort();
}

describe('rate_limit as a token bucket', () => {
  it('serves a burst, then the rate; above it 429 with the given Retry-After and a JSON body', async () => {
    await setFaults({ rate_limit: { requests_per_s: 2, burst: 3, retry_after_s: 5 } });
    for (let i = 0; i < 3; i++) expect((await user()).status).toBe(200);
    const limited = await user();
    expect(limited.status).toBe(429);
    expect(limited.headers['retry-after']).toBe('5');
    expect(limited.json()).toEqual({ message: 'Too Many Requests.', errors: {} });
    advance(500); // one token at 2/s
    expect((await user()).status).toBe(200);
    expect((await user()).status).toBe(429);
    advance(60_000); // the bucket holds `burst`, however long the quiet spell
    expect(await statuses(4)).toEqual([200, 200, 200, 429]);
    expect(await stats()).toMatchObject({ total: 10, rate_limited: 3, lockouts: 0 });
  });

  it('locks every request out for lockout_s after escalate_after 429s within a minute, then serves again', async () => {
    await setFaults({ rate_limit: { requests_per_s: 1, burst: 1, retry_after_s: 2, escalate_after: 3, lockout_s: 30 } });
    expect((await user()).status).toBe(200);
    for (let i = 0; i < 3; i++) expect((await user()).headers['retry-after']).toBe('2');
    expect(await stats()).toMatchObject({ rate_limited: 3, lockouts: 1 });

    advance(5_000); // the bucket has tokens again, but the account is locked out
    const locked = await user();
    expect(locked.status).toBe(429);
    expect(locked.headers['retry-after']).toBe('25');
    advance(24_999);
    expect((await user()).headers['retry-after']).toBe('1');
    advance(1); // 30 s after the lockout began
    expect((await user()).status).toBe(200);
    expect(await stats()).toMatchObject({ total: 7, rate_limited: 5, lockouts: 1 });
  });

  it('does not escalate on 429s spread over more than a minute, and counts each lockout begun', async () => {
    await setFaults({ rate_limit: { requests_per_s: 1, burst: 1, retry_after_s: 1, escalate_after: 3, lockout_s: 10 } });
    const servedThenLimited = async () => [(await user()).status, (await user()).status];
    expect(await servedThenLimited()).toEqual([200, 429]); // 429 #1 at 0 s
    advance(30_000);
    expect(await servedThenLimited()).toEqual([200, 429]); // #2 at 30 s
    advance(31_000);
    expect(await servedThenLimited()).toEqual([200, 429]); // #3 at 61 s: #1 is more than a minute old
    expect((await stats()).lockouts).toBe(0);
    expect((await user()).status).toBe(429); // #4: #2..#4 within a minute
    expect((await stats()).lockouts).toBe(1);
    advance(10_000);
    expect(await servedThenLimited()).toEqual([200, 429]); // a fresh count after the lockout
    expect((await stats()).lockouts).toBe(1);
  });

  it('restarts with a full bucket and no lockout when the faults are set again', async () => {
    const bucket = { rate_limit: { requests_per_s: 1, burst: 2, retry_after_s: 1, escalate_after: 1, lockout_s: 600 } };
    await setFaults(bucket);
    expect(await statuses(3)).toEqual([200, 200, 429]);
    expect((await user()).status).toBe(429);
    await setFaults(bucket);
    expect(await statuses(3)).toEqual([200, 200, 429]);
    await control('DELETE', '/faults');
    expect(await statuses(5)).toEqual([200, 200, 200, 200, 200]);
  });
});

describe('rate_limit after_n', () => {
  it('serves after_n requests, then 429 until retry_after_s has passed since the first 429', async () => {
    await setFaults({ rate_limit: { after_n: 2, retry_after_s: 30 } });
    expect(await statuses(4)).toEqual([200, 200, 429, 429]);
    advance(29_999);
    expect((await user()).headers['retry-after']).toBe('30');
    advance(1);
    expect(await statuses(3)).toEqual([200, 200, 429]);
    expect(await stats()).toMatchObject({ total: 8, rate_limited: 4, lockouts: 0 });
  });
});

describe('peak_per_s', () => {
  it('is the most requests in any sliding one-second window, 429s included', async () => {
    await statuses(5); // at 0 ms
    advance(400);
    await statuses(7); // 400 ms
    advance(599);
    await statuses(3); // 999 ms: 15 within (-1, 999]
    advance(1);
    await statuses(4); // 1000 ms: the first 5 have left the window, 14
    advance(400);
    await statuses(1); // 1400 ms: 8
    expect(await stats()).toMatchObject({ total: 20, peak_per_s: 15 });

    advance(5_000);
    await setFaults({ rate_limit: { requests_per_s: 1, burst: 2, retry_after_s: 1 } });
    expect(await statuses(10)).toEqual([200, 200, 429, 429, 429, 429, 429, 429, 429, 429]);
    advance(999);
    expect(await statuses(10)).toEqual(Array(10).fill(429)); // 0.999 of a token: none
    expect(await stats()).toMatchObject({ total: 40, peak_per_s: 20, rate_limited: 18 });
  });

  it('counts a burst larger than its ring started with, and starts again at a stats reset', async () => {
    for (let i = 0; i < 3; i++) await statuses(50); // 150 at one instant
    advance(1000);
    await statuses(1);
    expect((await stats()).peak_per_s).toBe(150);
    await control('POST', '/stats/reset');
    expect((await stats()).peak_per_s).toBe(0);
    await statuses(2);
    expect((await stats()).peak_per_s).toBe(2);
  });
});

describe('rate_limit validation', () => {
  it.each([
    [{ after_n: 2, requests_per_s: 1, burst: 1, retry_after_s: 1 }, ['after_n', 'requests_per_s', 'burst']],
    [{ after_n: 2, lockout_s: 5, retry_after_s: 1 }, ['after_n', 'lockout_s']],
    [{ retry_after_s: 1 }, ['after_n', 'requests_per_s']],
    [{ requests_per_s: 1, retry_after_s: 1 }, ['burst']],
    [{ burst: 5, retry_after_s: 1 }, ['requests_per_s']],
    [{ escalate_after: 3, lockout_s: 5, retry_after_s: 1 }, ['requests_per_s', 'burst']],
    [{ requests_per_s: 1, burst: 1, escalate_after: 3, retry_after_s: 1 }, ['lockout_s']],
    [{ requests_per_s: 1, burst: 1, lockout_s: 3, retry_after_s: 1 }, ['escalate_after']],
    [{ requests_per_s: 0, burst: 1, retry_after_s: 1 }, ['requests_per_s']],
    [{ requests_per_s: 1, burst: 1.5, retry_after_s: 1 }, ['burst']],
    [{ requests_per_s: 1, burst: 1, escalate_after: 0, lockout_s: 5, retry_after_s: 1 }, ['escalate_after']],
    [{ requests_per_s: 1, burst: 1 }, ['retry_after_s']],
    [{ requests_per_s: 1, burst: 1, retry_after_s: 1, per_minute: 3 }, ['per_minute']],
  ])('rejects rate_limit %j naming %j, and keeps the faults it had', async (rateLimit, fields) => {
    await setFaults({ latency_ms: 1 });
    const a = await control('PUT', '/faults', { rate_limit: rateLimit });
    expect(a.status).toBe(400);
    expect(a.headers['content-type']).toMatch(/^application\/json/);
    const body = a.json();
    expect(Object.keys(body.errors)).toEqual(fields);
    for (const f of fields) expect(body.errors[f]).toEqual([body.message]);
    expect((await control('GET', '/faults')).json()).toEqual({ latency_ms: 1 });
  });

  it('answers the fault set as given', async () => {
    const faults = { rate_limit: { requests_per_s: 0.5, burst: 4, retry_after_s: 3, escalate_after: 2, lockout_s: 60 } };
    await setFaults(faults);
    expect((await control('GET', '/faults')).json()).toEqual(faults);
  });
});
