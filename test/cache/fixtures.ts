import { createHash } from 'node:crypto';
import type { CacheEntry } from '../../src/cache/entry.js';

/**
 * Test data shaped like the Read API's answers: deterministic (seeded), so that codec
 * measurements and byte-equality assertions are reproducible run to run.
 */

/** Small deterministic PRNG (mulberry32): the same seed always gives the same page. */
function makeRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WORDS = [
  'login',
  'checkout',
  'payment',
  'smoke',
  'regression',
  'api',
  'mobile',
  'search',
  'profile',
  'cart',
  'invoice',
  'export',
  'import',
  'admin',
  'report',
  'sync',
  'upload',
  'timeout',
  'retry',
  'cache',
];
const STATES = ['passed', 'failed', 'blocked', 'untested', 'retest'];

function sentence(random: () => number, words: number): string {
  const out: string[] = [];
  for (let i = 0; i < words; i++) out.push(WORDS[Math.floor(random() * WORDS.length)]!);
  return out.join(' ');
}

function isoDate(random: () => number): string {
  return new Date(1_700_000_000_000 + Math.floor(random() * 30_000_000_000)).toISOString();
}

/** One test-run-like object with 40 fields: ids, names, counters, dates, flags, nulls. */
function makeItem(random: () => number, id: number): Record<string, unknown> {
  const item: Record<string, unknown> = {
    id,
    project_id: 5,
    milestone_id: 1 + Math.floor(random() * 12),
    plan_id: null,
    name: `Run ${id}: ${sentence(random, 3)}`,
    description: sentence(random, 7),
    suite_id: 100 + Math.floor(random() * 40),
    config: random() > 0.5 ? 'Chrome, Linux' : null,
    config_ids: [1, 2 + Math.floor(random() * 5)],
    is_completed: random() > 0.7,
    completed_on: random() > 0.7 ? isoDate(random) : null,
    created_on: isoDate(random),
    created_by: 1 + Math.floor(random() * 30),
    assignedto_id: random() > 0.3 ? Math.floor(random() * 30) : null,
    include_all: random() > 0.5,
    refs: random() > 0.5 ? `JIRA-${Math.floor(random() * 9000)}` : null,
    url: `https://example.test/index.php?/runs/view/${id}`,
    updated_on: isoDate(random),
    state: STATES[Math.floor(random() * STATES.length)],
    priority: Math.floor(random() * 4),
  };
  for (const state of STATES) item[`${state}_count`] = Math.floor(random() * 200);
  for (let i = 1; i <= 5; i++) item[`custom_status${i}_count`] = Math.floor(random() * 3);
  item.owner = { id: Math.floor(random() * 30), name: `User ${Math.floor(random() * 30)}`, email: 'qa@example.test' };
  item.labels = [sentence(random, 1), sentence(random, 1)];
  item.elapsed = `${Math.floor(random() * 8)}h ${Math.floor(random() * 60)}m`;
  item.estimate = null;
  item.estimate_forecast = random() > 0.5 ? `${Math.floor(random() * 30)}m` : null;
  item.dataset_id = null;
  item.is_archived = false;
  item.blocked_reason = null;
  return item;
}

/** A list page as the Read API returns it: `{offset, limit, size, _links, runs: [...]}`. */
export function makeListPageBody(count = 100, seed = 42): Buffer {
  const random = makeRandom(seed);
  const runs = Array.from({ length: count }, (_, i) => makeItem(random, 1000 + i));
  const page = { offset: 0, limit: count, size: count, _links: { next: '/api/v2/get_runs/5&offset=100', prev: null }, runs };
  return Buffer.from(JSON.stringify(page));
}

/** A complete entry around `body`, fresh for `freshMs` after `now`. */
export function makeEntry(now: number, overrides: Partial<CacheEntry> = {}): CacheEntry {
  const body = overrides.body ?? Buffer.from('{"id":1,"name":"Run 1: login smoke"}');
  const etag = `"${createHash('sha256').update(body).digest('hex').slice(0, 16)}-${body.length.toString(16)}"`;
  return {
    status: 200,
    // Only headers tm-cache stores (storable.ts): an entry read back with any other is refused.
    headers: { 'content-type': 'application/json; charset=utf-8', etag, 'cache-control': 'private', vary: 'Authorization, Accept-Encoding' },
    body,
    etag,
    storedAt: now,
    freshUntil: now + 60_000,
    staleWhileRevalidateUntil: now + 120_000,
    staleIfErrorUntil: now + 300_000,
    tags: ['project:5', 'run:1000'],
    ...overrides,
  };
}
