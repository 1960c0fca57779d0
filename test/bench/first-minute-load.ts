/**
 * What the first-minute scenario's clients do, and the instance they meet: one GET read with its
 * Retry-After and Cache-Status, a dashboard's panels loaded six at a time (a browser's connections
 * per host), and the emulator's faults for an instance 150 ms away whose limit tm-cache is not told.
 * The instance's answers are counted by sampling its stats (`/__emulator/stats`).
 */
import type { Dispatcher } from 'undici';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Faults } from '../../src/emulator/faults.js';
import { tally } from './questions.js';
import type { Emulator } from './servers.js';

export const LATENCY_MS = 150;
/** The instance's limit (requests per second), never given to tm-cache. */
export const LIMIT_RPS = 20;
/** The Retry-After (s) of the instance's 429s, as fleet-learn's instance. */
const RETRY_AFTER_S = 5;
/** Panels a browser loads at once: its connections per host. */
export const PANELS_AT_ONCE = 6;

/** An instance that limits but never locks out: 20 req/s, a burst of 20. */
export const PLAIN_INSTANCE: Faults = { latency_ms: LATENCY_MS, rate_limit: { requests_per_s: LIMIT_RPS, burst: LIMIT_RPS, retry_after_s: RETRY_AFTER_S } };

/** An instance that locks the account out for `lockoutS` after 3 429s within a minute. */
export function lockingInstance(burst: number, lockoutS: number): Faults {
  return {
    latency_ms: LATENCY_MS,
    rate_limit: { requests_per_s: LIMIT_RPS, burst, retry_after_s: RETRY_AFTER_S, escalate_after: 3, lockout_s: lockoutS },
  };
}

export const describeInstance = (f: Faults): string => {
  const rl = f.rate_limit!;
  const lockout = rl.escalate_after === undefined ? 'no lockout' : `${rl.escalate_after} 429s within a minute lock it out for ${rl.lockout_s} s`;
  return `${f.latency_ms} ms away, ${rl.requests_per_s} req/s (burst ${rl.burst}; 429 Retry-After ${rl.retry_after_s} s; ${lockout})`;
};

export interface Answer {
  /** The HTTP status, or 0 when the request itself failed (connection refused or reset, timeout). */
  readonly status: number;
  readonly cacheStatus: string;
  /** Retry-After of a 429 or 503 (s). */
  readonly retryAfterS: number | undefined;
  /** The answer's Age (s), 0 when it carries none. */
  readonly ageS: number;
  readonly ms: number;
}

const header = (v: string | string[] | undefined): string => (Array.isArray(v) ? v.join(', ') : (v ?? ''));

/** GET `path` as `token`, the body read to its end. */
export async function get(pool: Dispatcher, path: string, token: string): Promise<Answer> {
  const t0 = performance.now();
  try {
    const res = await pool.request({ method: 'GET', path, headers: { authorization: `Bearer ${token}` }, headersTimeout: 30_000, bodyTimeout: 30_000 });
    await res.body.arrayBuffer();
    const retryAfter = header(res.headers['retry-after']);
    return {
      status: res.statusCode,
      cacheStatus: header(res.headers['cache-status']),
      retryAfterS: retryAfter === '' ? undefined : Number(retryAfter),
      ageS: Number(header(res.headers.age)) || 0,
      ms: performance.now() - t0,
    };
  } catch {
    return { status: 0, cacheStatus: '', retryAfterS: undefined, ageS: 0, ms: performance.now() - t0 };
  }
}

/** Answered from tm-cache's store: a hit, or a stale answer served while it is refreshed. */
export const isFromCache = (a: Answer): boolean => a.status === 200 && /; (hit|fwd=stale)\b/.test(a.cacheStatus);

export interface Load {
  /** From the first request to the last byte of the last answer. */
  readonly ms: number;
  readonly answers: Answer[];
}

/** `paths` asked `PANELS_AT_ONCE` at a time, each connection taking the next panel as it is free. */
export async function loadPanels(pool: Dispatcher, paths: readonly string[], token: string): Promise<Load> {
  const t0 = performance.now();
  const answers: Answer[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(PANELS_AT_ONCE, paths.length) }, async () => {
      while (next < paths.length) answers.push(await get(pool, paths[next++]!, token));
    }),
  );
  return { ms: performance.now() - t0, answers };
}

export interface Sample {
  /** performance.now() when the stats were read. */
  readonly atMs: number;
  readonly total: number;
  /** Requests the instance answered (not 429): its total less what its rate limit refused. */
  readonly served: number;
  readonly rateLimited: number;
  readonly lockouts: number;
}

export async function sample(em: Emulator): Promise<Sample> {
  const s = await em.stats();
  return { atMs: performance.now(), total: s.total, served: s.total - s.rate_limited, rateLimited: s.rate_limited, lockouts: s.lockouts };
}

/** The instance's stats every `everyMs` until `untilMs` (performance.now()). */
export async function sampleUntil(em: Emulator, everyMs: number, untilMs: number): Promise<Sample[]> {
  const samples = [await sample(em)];
  while (performance.now() < untilMs) {
    await sleep(Math.max(0, Math.min(everyMs, untilMs - performance.now())));
    samples.push(await sample(em));
  }
  return samples;
}

/** Requests the instance served per second between two samples. */
export const servedPerS = (a: Sample, b: Sample): number => ((b.served - a.served) * 1_000) / (b.atMs - a.atMs);

/** Answers by status ('error': the request itself failed). */
export function tallyStatuses(answers: readonly Pick<Answer, 'status'>[]): Record<string, number> {
  return tally(answers.map((a) => (a.status === 0 ? 'error' : String(a.status))));
}
