/**
 * Scenario 6: memory under hostile traffic (hardening issue, item 5). Each part starts its own
 * `tm-cache serve` (the built dist/, as the other scenarios) and reads its RSS from /proc before
 * and after (VmRSS), and its peak (VmHWM):
 *
 *   (a) 9,900 GETs with random, unrecognized tokens to distinct 14 KB URLs; target: growth < 50 MB.
 *   (b) one member token spelled 10,000 ways (scheme case, whitespace); target: 1 upstream GET /user.
 *   (c) three concurrent 200 MB answers, chunked, from a small hostile upstream (node:http, here):
 *       each cut off at upstream.maxBodyBytes and answered 502.
 *   (d) fairness: one member keeps 1,300 distinct cold questions open against the emulator slowed
 *       to 400 ms (each worker asks its next as soon as one is served, and stops at its first
 *       refusal); once the flood has hit a bound (its first refusal), a second member asks 20 cold
 *       questions at once. Target: the victim's misses served during the flood, 20 of 20.
 *   (e) passthrough floods (security-passthrough.ts): 60 requests without a credential, with a
 *       cache-buster, or writes, ten at a time to one of two replicas over Redis in front of an
 *       instance that locks the account out; targets: no 429 from the instance, no lockout, the
 *       other replica serves a cold miss, the fleet's rate a minute later its budget.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { Pool } from 'undici';
import { startHostileUpstream } from '../helpers/hostile-upstream.js';
import { drive, tally } from './questions.js';
import { runPassthroughFloods, type PassthroughFloodFigure } from './security-passthrough.js';
import { fmt, printTable, type Check } from './report.js';
import { startTmCache, type Emulator, type Server, type TokenInfo } from './servers.js';

const MB = 1_000_000;
const FLOOD_CONCURRENT = 1_300;
const VICTIM_MISSES = 20;
const SLOW_MS = 400;
const USER_ROUTE = 'GET /api/v1/user';
const CONCURRENCY = 32;

/** Resident and peak resident bytes of a process (Linux /proc). */
function memoryOf(pid: number): { rss: number; peak: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kB = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN) * 1024;
  return { rss: kB('VmRSS'), peak: kB('VmHWM') };
}

export interface MemoryFigure {
  readonly what: string;
  readonly requests: number;
  readonly rssBeforeMb: number;
  readonly rssAfterMb: number;
  readonly growthMb: number;
  readonly peakGrowthMb: number;
  readonly statuses: Record<string, number>;
  readonly userLookups?: number;
}

/** Runs `load` against a fresh tm-cache in front of `upstream`; RSS growth and peak growth of that process. */
async function measure(what: string, upstream: string, requests: number, load: (proxy: Server) => Promise<Record<string, number>>): Promise<MemoryFigure> {
  const proxy = await startTmCache(upstream, { name: `tm-cache (${what})` });
  try {
    const before = memoryOf(proxy.proc.pid);
    const statuses = await load(proxy);
    const after = memoryOf(proxy.proc.pid);
    return {
      what,
      requests,
      rssBeforeMb: before.rss / MB,
      rssAfterMb: after.rss / MB,
      growthMb: (after.rss - before.rss) / MB,
      peakGrowthMb: (after.peak - before.rss) / MB,
      statuses,
    };
  } finally {
    await proxy.proc.stop();
  }
}

/** The i-th spelling of `Bearer <token>`: scheme case and whitespace vary (RFC 9110 §11.1). */
function spelling(token: string, i: number): string {
  const schemes = ['Bearer', 'bearer', 'BEARER', 'bEARER', 'BeArEr', 'beareR', 'BEarer', 'bearER'];
  return `${schemes[i % schemes.length]}${' '.repeat(1 + Math.floor(i / schemes.length))}${token}`;
}

export interface SecurityScenario {
  readonly figures: MemoryFigure[];
  readonly fairness: FairnessFigure;
  readonly passthrough: PassthroughFloodFigure[];
  readonly checks: Check[];
}

export interface FairnessFigure {
  /** The victim's cold misses answered 200 while the flood lasted, of VICTIM_MISSES. */
  readonly victimServed: number;
  readonly victimStatuses: Record<string, number>;
  /** The slowest of the victim's misses, arrival to whole answer (ms). */
  readonly victimSlowestMs: number;
}

/** Two members with distinct users and a project each: the flooder and the victim. */
function twoMembers(emulator: Emulator): [TokenInfo, TokenInfo] {
  const members = emulator.tokens.filter((t) => !t.is_admin && t.project_ids.length > 0);
  const flooder = members[0];
  const victim = members.find((t) => t.user_id !== flooder?.user_id);
  if (flooder === undefined || victim === undefined) throw new Error('the emulator has fewer than two members with projects');
  return [flooder, victim];
}

/** One GET through `pool`, its body read whole: the status, or `error <code>`. */
async function statusOf(pool: Pool, path: string, token: string): Promise<string> {
  try {
    const res = await pool.request({ method: 'GET', path, headers: { authorization: `Bearer ${token}` }, headersTimeout: 60_000, bodyTimeout: 60_000 });
    await res.body.dump();
    return String(res.statusCode);
  } catch (err) {
    return `error ${(err as { code?: string }).code ?? String(err).slice(0, 40)}`;
  }
}

/**
 * (d): the flood and the victim's misses against `proxy`, the emulator slowed to SLOW_MS for the
 * duration. Answers the flood's tally of statuses; the victim's figure goes to `out`.
 */
async function floodAndVictim(proxy: Server, emulator: Emulator, out: { fairness?: FairnessFigure }): Promise<Record<string, number>> {
  const [flooder, victim] = twoMembers(emulator);
  // Distinct cold questions no cached answer derives (a filter by a creator who made no run, never
  // another page of one list): every one a miss that asks the instance.
  const floodPath = (n: number) => `/api/v1/projects/${flooder.project_ids[0]}/runs?per_page=25&created_by=${1_000_000 + n}`;
  const victimPath = (i: number) => `/api/v1/projects/${victim.project_ids[0]}/runs?per_page=25&created_by=${2_000_000 + i}`;
  const floodPool = new Pool(proxy.url, { connections: FLOOD_CONCURRENT });
  const victimPool = new Pool(proxy.url, { connections: VICTIM_MISSES });
  const flood: string[] = [];
  let stopped = false;
  let next = 0;
  try {
    // Both identities known first, so each question is one cold fill.
    for (const [who, path] of [
      [flooder, floodPath(-1)],
      [victim, victimPath(-1)],
    ] as const)
      await statusOf(victimPool, path, who.token);
    await emulator.faults({ latency_ms: SLOW_MS });
    const worker = async (): Promise<void> => {
      while (!stopped) {
        const status = await statusOf(floodPool, floodPath(next++), flooder.token);
        flood.push(status);
        if (status !== '200') return;
      }
    };
    const workers = Promise.all(Array.from({ length: FLOOD_CONCURRENT }, worker));
    const deadline = performance.now() + 60_000;
    while (!flood.some((s) => s !== '200') && performance.now() < deadline) await sleep(25);
    const t0 = performance.now();
    const victimStatuses = await Promise.all(
      Array.from({ length: VICTIM_MISSES }, async (_, i) => {
        const status = await statusOf(victimPool, victimPath(i), victim.token);
        return { status, ms: performance.now() - t0 };
      }),
    );
    stopped = true;
    await workers;
    out.fairness = {
      victimServed: victimStatuses.filter((v) => v.status === '200').length,
      victimStatuses: tally(victimStatuses.map((v) => v.status)),
      victimSlowestMs: Math.max(...victimStatuses.map((v) => v.ms)),
    };
    return tally(flood);
  } finally {
    stopped = true;
    await emulator.faults({});
    await Promise.all([floodPool.close(), victimPool.close()]);
  }
}

export async function runSecurityScenario(
  emulator: Emulator,
  member: { token: string; path: string },
  counts = { flood: 9_900, spellings: 10_000 },
): Promise<SecurityScenario> {
  const long = 'a'.repeat(14 * 1024);
  const flood = await measure('a: unrecognized tokens, distinct 14 KB URLs', emulator.url, counts.flood, (proxy) =>
    drive(proxy.url, counts.flood, CONCURRENCY, (i) => ({
      path: `/api/v1/projects/1/runs?x${i}=${long}`,
      authorization: `Bearer ${randomBytes(20).toString('hex')}`,
    })),
  );
  await emulator.resetStats();
  const spelled = await measure('b: one token spelled 10,000 ways', emulator.url, counts.spellings, (proxy) =>
    drive(proxy.url, counts.spellings, CONCURRENCY, (i) => ({ path: member.path, authorization: spelling(member.token, i) })),
  );
  // The readiness probe (/readyz asks the instance with an unauthenticated GET /user, README
  // "Health") is no look-up of the token: requests without a token are left out.
  const stats = await emulator.stats();
  const userLookups = (stats.by_route[USER_ROUTE] ?? 0) - (stats.by_token['(none)'] ?? 0);
  const hostile = await startHostileUpstream(() => ({ bytes: 200 * 1024 * 1024, announce: false }));
  let huge: MemoryFigure;
  try {
    huge = await measure('c: three concurrent 200 MB answers', hostile.url, 3, (proxy) =>
      drive(proxy.url, 3, CONCURRENCY, (i) => ({ path: `/api/v1/projects/${i + 1}/runs`, authorization: 'Bearer hostile' })),
    );
  } finally {
    await hostile.close();
  }
  const victim: { fairness?: FairnessFigure } = {};
  const fair = await measure(`d: one member's ${fmt(FLOOD_CONCURRENT, 0)} open cold questions, 400 ms`, emulator.url, FLOOD_CONCURRENT, (proxy) =>
    floodAndVictim(proxy, emulator, victim),
  );
  const fairness = victim.fairness!;
  const figures = [flood, { ...spelled, userLookups }, huge, fair];
  printTable(
    '6. Memory under hostile traffic: RSS of a fresh tm-cache process per line (MB)',
    ['load', 'requests', 'RSS before', 'RSS after', 'growth', 'peak growth', 'GET /user', 'answers'],
    figures.map((f) => [
      f.what,
      f.requests,
      fmt(f.rssBeforeMb, 0),
      fmt(f.rssAfterMb, 0),
      fmt(f.growthMb, 1),
      fmt(f.peakGrowthMb, 1),
      f.userLookups ?? '—',
      JSON.stringify(f.statuses),
    ]),
    [
      'peak growth: VmHWM after the load minus VmRSS before it. (c) is bounded by 3 × upstream.maxBodyBytes (32 MiB) read before each cut-off.',
      `(d) requests: the flood's concurrency; answers: the flood's. The victim's ${VICTIM_MISSES} cold misses during the flood: ${JSON.stringify(fairness.victimStatuses)}, the slowest in ${fmt(fairness.victimSlowestMs, 0)} ms.`,
    ],
  );
  const passthrough = await runPassthroughFloods(emulator, ...twoMembers(emulator));
  return {
    figures,
    fairness,
    passthrough: passthrough.figures,
    checks: [
      { name: 'security: RSS growth, unrecognized-token flood (a)', value: flood.growthMb, unit: 'MB', target: '< 50 MB', pass: flood.growthMb < 50 },
      { name: 'security: upstream GET /user, one token 10,000 ways (b)', value: userLookups, unit: '', target: '= 1', pass: userLookups === 1 },
      { name: 'security: RSS growth, one token 10,000 ways (b)', value: spelled.growthMb, unit: 'MB', target: 'info', pass: undefined },
      { name: 'security: peak RSS growth, 3 × 200 MB answers (c)', value: huge.peakGrowthMb, unit: 'MB', target: 'info', pass: undefined },
      { name: 'security: 502 answers to 3 × 200 MB (c)', value: huge.statuses['502'] ?? 0, unit: '', target: '= 3', pass: huge.statuses['502'] === 3 },
      {
        name: "security: victim's misses served during the flood (d)",
        value: fairness.victimServed,
        unit: `of ${VICTIM_MISSES}`,
        target: `= ${VICTIM_MISSES}`,
        pass: fairness.victimServed === VICTIM_MISSES,
      },
      ...passthrough.checks,
    ],
  };
}
