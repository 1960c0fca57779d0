/**
 * `revocation`: measures the revocation figures of the README's revocation table, on the real
 * clock with the default settings: the emulator, two tm-cache replicas (in this process) sharing a
 * private redis-server (free port, never the machine's), clients polling until they are refused.
 * About 65 s; no short mode (the clocks are the defaults').
 *
 *   npm run bench -- revocation
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { DEFAULT_CONFIG } from '../../src/config/schema.js';
import { startTestEmulator, type TestEmulator } from '../helpers/emulator.js';
import { httpGet, startTestProxy, type TestProxy } from '../helpers/proxy.js';
import { startRedis } from '../helpers/redis.js';
import type { Check } from './report.js';

/** Polls `get` every `everyMs` until it is not a 200; answers when, in ms since `since`. */
async function pollUntilRefused(get: () => Promise<{ status: number }>, since: number, everyMs: number): Promise<number> {
  for (;;) {
    if ((await get()).status !== 200) return Date.now() - since;
    await sleep(everyMs);
  }
}

async function token(em: TestEmulator, i: number): Promise<{ token: string; userId: number; projectId: number }> {
  const m = em.tokens.member(i);
  const issued = await em.mutate({ op: 'issue_token', user_id: m.user_id });
  return { token: issued.token as string, userId: m.user_id, projectId: m.project_ids[0]! };
}

/** A closed run cached for a user, then the user loses its project. */
async function projectAccess(em: TestEmulator, a: TestProxy): Promise<{ line: string; afterRevocationS: number }> {
  const t = await token(em, 0);
  const runs = await httpGet(`${em.url}/api/v1/projects/${t.projectId}/runs?is_closed=1`, t.token);
  const path = `/api/v1/runs/${runs.json().result[0].id as number}`;
  const filled = Date.now();
  await a.get(path, t.token);
  await em.mutate({ op: 'revoke_project', user_id: t.userId, project_id: t.projectId });
  const revoked = Date.now();
  const afterFill = await pollUntilRefused(() => a.get(path, t.token), filled, 250);
  await em.mutate({ op: 'grant_project', user_id: t.userId, project_id: t.projectId });
  const afterRevocationS = (afterFill - (revoked - filled)) / 1000;
  return {
    line: `revoked project access (closed run, fresh 1 h): refused ${afterRevocationS.toFixed(1)} s after the revocation, ${(afterFill / 1000).toFixed(1)} s after the fill that confirmed access (projectConfirmMs ${DEFAULT_CONFIG.access.projectConfirmMs} ms, polled every 250 ms)`,
    afterRevocationS,
  };
}

/** Replica A refuses a revoked token on a fill; how long until replica B, which held it, refuses it too. */
async function forgetAcrossReplicas(em: TestEmulator, a: TestProxy, b: TestProxy): Promise<{ line: string; ms: number }> {
  const t = await token(em, 1);
  const path = '/api/v1/projects?per_page=25';
  await a.get(path, t.token);
  await b.get(path, t.token);
  await em.mutate({ op: 'revoke_token', token: t.token });
  await a.get('/api/v1/projects?per_page=50', t.token); // 401 on A: forgotten, published
  const refusedOnA = Date.now();
  const onB = await pollUntilRefused(() => b.get(path, t.token), refusedOnA, 1);
  return {
    line: `token refused (401) on replica A: replica B refuses it ${onB} ms later (it held the identity for ${DEFAULT_CONFIG.identity.ttlMs / 1000} s more)`,
    ms: onB,
  };
}

/** Replica B reads A's shared identity half-way through its life; the token is revoked just after. */
async function sharedIdentityExpiry(em: TestEmulator, a: TestProxy, b: TestProxy): Promise<{ line: string; s: number }> {
  const t = await token(em, 2);
  const path = '/api/v1/projects?per_page=15';
  const verified = Date.now();
  await a.get(path, t.token);
  await sleep(DEFAULT_CONFIG.identity.ttlMs / 2);
  await b.get(path, t.token);
  await em.mutate({ op: 'revoke_token', token: t.token });
  const refused = await pollUntilRefused(() => b.get(path, t.token), verified, 250);
  return {
    line: `token revoked upstream, read by replica B from Redis ${DEFAULT_CONFIG.identity.ttlMs / 2000} s after replica A verified it: B refuses it ${(refused / 1000).toFixed(1)} s after A's verification (identity.ttlMs ${DEFAULT_CONFIG.identity.ttlMs} ms, polled every 250 ms)`,
    s: refused / 1000,
  };
}

interface Revocation {
  readonly lines: string[];
  readonly checks: Check[];
}

export async function runRevocation(): Promise<Revocation> {
  const em = await startTestEmulator();
  const redis = await startRedis();
  const redisConfig = { cache: { redis: { url: redis.url, keyPrefix: 'bench-revocation:' } } };
  const [a, b] = [await startTestProxy(em.url, redisConfig), await startTestProxy(em.url, redisConfig)];
  try {
    const [project, forget, shared] = await Promise.all([projectAccess(em, a), forgetAcrossReplicas(em, a, b), sharedIdentityExpiry(em, a, b)]);
    const lines = [project.line, forget.line, shared.line];
    for (const line of lines) console.log(`- ${line}`);
    return {
      lines,
      checks: [
        {
          name: 'revocation: revoked project access refused, s after the revocation',
          value: project.afterRevocationS,
          unit: 's',
          target: 'info',
          pass: undefined,
        },
        { name: "revocation: replica B refuses a token after A's 401", value: forget.ms, unit: 'ms', target: 'info', pass: undefined },
        { name: "revocation: shared identity refused, s after A's verification", value: shared.s, unit: 's', target: 'info', pass: undefined },
      ],
    };
  } finally {
    await Promise.all([a.close(), b.close()]);
    await em.close();
    await redis.stop();
  }
}
