/**
 * Whether a browser's Origin splits the cache, learned from the instance (origin-keying.ts), over
 * real HTTP in front of the real emulator: an instance answering `Access-Control-Allow-Origin: *`
 * without Vary (its `cors.any_origin`) gets one entry for every origin once one answer taught it;
 * one that reflects the Origin with `Vary: Origin` keeps one entry per origin, each with its own
 * Access-Control-Allow-Origin. What reached the emulator is counted.
 */
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startTestEmulator, type TestEmulator } from '../helpers/emulator.js';
import { httpGet, startTestProxy, type TestProxy } from '../helpers/proxy.js';

let emulator: TestEmulator;
let proxy: TestProxy;
const [A, B, C] = ['https://a.dash.example', 'https://b.dash.example', 'https://c.dash.example'];
const route = 'GET /api/v1/projects/{project_id}/milestones';
const reads = async (): Promise<number> => (await emulator.stats()).by_route[route] ?? 0;

beforeAll(async () => {
  emulator = await startTestEmulator();
});
afterAll(async () => {
  await emulator?.close();
});
// A proxy of its own per test: what one learned must not decide the next.
beforeEach(async () => {
  proxy = await startTestProxy(emulator.url);
});
afterEach(async () => {
  await proxy?.close();
  await emulator.clearFaults();
});

function milestones(): { url: string; token: string } {
  const { token, project_ids } = emulator.tokens.member(0);
  return { url: `${proxy.url}/api/v1/projects/${project_ids[0]}/milestones`, token };
}

describe('Origin in the key', () => {
  it('an instance answering Allow-Origin * without Vary: once one answer said so, two origins share one entry (one upstream request)', async () => {
    await emulator.faults({ cors: { origins: [], any_origin: true } });
    const { url, token } = milestones();
    // The first browser request teaches the proxy: until then each origin has its own entries.
    const first = await httpGet(url, token, { origin: A });
    expect(first.status).toBe(200);
    expect(first.headers['vary']).not.toMatch(/Origin/);
    const before = await reads();

    const fromB = await httpGet(url, token, { origin: B });
    const fromC = await httpGet(url, token, { origin: C });
    expect(fromB.headers['access-control-allow-origin']).toBe('*');
    expect(fromC.headers['access-control-allow-origin']).toBe('*');
    expect(fromC.headers['cache-status']).toMatch(/; hit/);
    expect(await reads()).toBe(before + 1);
    // The origin that taught it reads the shared entry too.
    expect((await httpGet(url, token, { origin: A })).headers['cache-status']).toMatch(/; hit/);
    expect(await reads()).toBe(before + 1);
  });

  it('an instance reflecting the Origin with Vary: Origin: each origin its own entry and its own Allow-Origin, never another one', async () => {
    await emulator.faults({ cors: { origins: [A, B, C] } });
    const { url, token } = milestones();
    expect((await httpGet(url, token, { origin: A })).headers['access-control-allow-origin']).toBe(A);
    const before = await reads();

    const fromB = await httpGet(url, token, { origin: B });
    const fromC = await httpGet(url, token, { origin: C });
    expect(fromB.headers['access-control-allow-origin']).toBe(B);
    expect(fromC.headers['access-control-allow-origin']).toBe(C);
    expect(fromC.headers['vary']).toMatch(/Origin/);
    expect(await reads()).toBe(before + 2);
    // Each is then a hit of its own.
    const hitB = await httpGet(url, token, { origin: B });
    expect(hitB.headers['cache-status']).toMatch(/; hit/);
    expect(hitB.headers['access-control-allow-origin']).toBe(B);
    expect(await reads()).toBe(before + 2);
  });

  it("an instance that turns from * to reflecting: the answer naming one origin is never stored in every origin's entry", async () => {
    await emulator.faults({ cors: { origins: [], any_origin: true } });
    const { url, token } = milestones();
    await httpGet(url, token, { origin: A });
    expect((await httpGet(url, token, { origin: B })).headers['access-control-allow-origin']).toBe('*');
    // Asked again for every origin's entry (no-cache), the instance now names C: C is answered
    // with it, the entries split again, and B gets its own answer.
    await emulator.faults({ cors: { origins: [A, B, C] } });
    const fresh = await httpGet(url, token, { origin: C, 'cache-control': 'no-cache' });
    expect(fresh.headers['access-control-allow-origin']).toBe(C);
    const before = await reads();
    expect((await httpGet(url, token, { origin: B })).headers['access-control-allow-origin']).toBe(B);
    expect(await reads()).toBe(before + 1);
    // Back to *: every origin's entry still holds what is right for every origin, not C's answer.
    await emulator.faults({ cors: { origins: [], any_origin: true } });
    await httpGet(url, token, { origin: A, 'cache-control': 'no-cache' });
    expect((await httpGet(url, token, { origin: B })).headers['access-control-allow-origin']).toBe('*');
  });
});
