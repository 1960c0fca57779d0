/**
 * Threat: one member starves the others by flooding the instance with distinct cold questions.
 * What holds: each user has a share of the fill lanes (`upstream.maxPerUser`, in flight and
 * waiting together) and freed slots go round-robin between users, so while one member keeps
 * ~1,300 questions open against a slow instance (400 ms), another member's cold misses are all
 * served; the flooder alone gets the JSON 503 past their share. Default upstream settings.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { TestResponse } from '../helpers/proxy.js';
import { proxyOverEmulator } from '../helpers/setup.js';
import { until } from '../helpers/wait.js';

const FLOOD_CONCURRENT = 1_300;
const VICTIM_MISSES = 20;
const LATENCY_MS = 400;

const env = proxyOverEmulator();

afterEach(async () => {
  await env.emulator.clearFaults();
});

/**
 * One member keeping `concurrent` distinct cold questions open: each worker asks the next one as
 * soon as its last was served, and gives up at its first refusal (as a client told 503 would),
 * until `stop`. Every answer is kept, settled, so a failed assertion leaves nothing unhandled.
 */
function startFlood(token: string, project: number, concurrent: number) {
  let next = 0;
  let stopped = false;
  const answers: TestResponse[] = [];
  const worker = async (): Promise<void> => {
    while (!stopped) {
      // Each a list of its own (its own created_before), an empty page past its last: a page of one list would be derived from another.
      const before = new Date(Date.UTC(2100, 0, 1) + next++).toISOString();
      const res = await env.proxy.get(`/api/v1/projects/${project}/runs?per_page=25&page=1000&created_before=${before}`, token);
      answers.push(res);
      if (res.status !== 200) return;
    }
  };
  const done = Promise.allSettled(Array.from({ length: concurrent }, worker));
  return {
    answers,
    refusals: () => answers.filter((r) => r.status !== 200).length,
    stop: async () => {
      stopped = true;
      return done;
    },
  };
}

describe('a member flooding a slow instance with distinct cold questions', () => {
  it('leaves another member’s cold misses all served while the flood lasts, and refuses the flooder alone', async () => {
    const flooder = env.emulator.tokens.member(0);
    const victim = env.emulator.tokens.member(1);
    expect(victim.user_id).not.toBe(flooder.user_id);
    const flooderProject = flooder.project_ids[0]!;
    const victimProject = victim.project_ids[0]!;
    // Both are known before the flood starts (their identities are memoized).
    expect((await env.proxy.get(`/api/v1/projects/${flooderProject}`, flooder.token)).status).toBe(200);
    expect((await env.proxy.get(`/api/v1/projects/${victimProject}`, victim.token)).status).toBe(200);
    await env.emulator.faults({ latency_ms: LATENCY_MS });

    const flood = startFlood(flooder.token, flooderProject, FLOOD_CONCURRENT);
    let misses: TestResponse[];
    try {
      // The flood has reached a bound (its first refusal): whatever could be queued is.
      await until(async () => flood.refusals() > 0, 20_000);
      // Lists of their own (a filter each): pages of one list could be derived from one another once one is in.
      misses = await Promise.all(
        Array.from({ length: VICTIM_MISSES }, (_, i) => env.proxy.get(`/api/v1/projects/${victimProject}/runs?per_page=25&created_by=${i + 1}`, victim.token)),
      );
    } finally {
      await flood.stop();
    }

    expect(misses.map((r) => r.status)).toEqual(misses.map(() => 200));
    for (const res of misses) expect(res.headers['cache-status']).toContain('fwd=uri-miss');
    // The flooder got the same JSON 503 as a full queue gives, and nothing else but 200s.
    for (const res of flood.answers) expect([200, 503]).toContain(res.status);
    const refused = flood.answers.filter((r) => r.status === 503);
    expect(refused.length).toBeGreaterThan(0);
    for (const res of refused) expect(typeof res.json().message).toBe('string');
  }, 120_000);
});
