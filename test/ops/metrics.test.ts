/**
 * /metrics over real HTTP, after real traffic through tm-cache (real emulator, real
 * redis-server): every outcome is counted once under its own label, whichever path answered;
 * histograms, upstream and Redis families, identity look-ups, evictions; Prometheus' standard
 * names for Node's own metrics; never a credential or a user id in a label.
 */
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestEmulator, type TestEmulator } from '../helpers/emulator.js';
import { startTestProxy, type TestProxy } from '../helpers/proxy.js';
import { startRedis, type RedisHandle } from '../helpers/redis.js';
import { until } from '../helpers/wait.js';

let emulator: TestEmulator;
let redis: RedisHandle;
let proxy: TestProxy;
let text: string;

async function scrape(): Promise<string> {
  const res = await request(`${proxy.managementUrl}/metrics`);
  return res.body.text();
}

/** The value of one sample line, by metric name and exact label set (in exposition order). */
function sample(name: string, labels = ''): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${name}${labels === '' ? ' ' : `{${labels}} `}`));
  return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(' ') + 1));
}

function requests(outcome: string, tier: string, operation: string, statusClass: string): number | undefined {
  return sample('tm_cache_requests_total', `outcome="${outcome}",tier="${tier}",operation="${operation}",status_class="${statusClass}"`);
}

beforeAll(async () => {
  emulator = await startTestEmulator();
  redis = await startRedis();
  // A memory tier of 16 KiB: a few answers fill it, so later ones evict.
  proxy = await startTestProxy(emulator.url, { cache: { redis: { url: redis.url, commandTimeoutMs: 2_000 }, memory: { maxBytes: 16 * 1024 } } });
  const m = emulator.tokens.member(0);
  const noAccess = emulator.tokens.noAccess();
  const project = m.project_ids[0]!;
  const foreign = emulator.tokens.all.flatMap((t) => t.project_ids).find((id) => !m.project_ids.includes(id))!;

  const path = `/api/v1/projects/${project}/milestones`;
  await proxy.get(path, m.token); // miss (and identity from upstream)
  await proxy.get(path, m.token); // memory hit (identity from the memo)
  // One miss, two coalesced: the upstream's 500 ms keep the fill running while the other two
  // arrive, however loaded the machine (without it a late third request was a hit).
  await emulator.faults({ latency_ms: 500 });
  await Promise.all([1, 2, 3].map(() => proxy.get(`/api/v1/projects/${project}/runs?per_page=15`, m.token)));
  await emulator.clearFaults();
  await proxy.get(`/api/v1/projects/${project}/runs?colour=blue`, m.token); // unknown parameter: bypass
  await proxy.get(`/api/v1/projects/${project}/runs?per_page=7`, m.token); // invalid: local 422
  await proxy.get('/api/v1/users', noAccess.token); // admin-only for a non-admin: relayed 403
  await proxy.get(`/api/v1/projects/${foreign}`, m.token); // another's project: relayed 404
  await proxy.get('/api/v1/projects', 'not-a-token'); // refused credential: relayed 401
  await request(`${proxy.url}/api/v1/user`).then((r) => r.body.dump()); // no credential: passthrough
  for (let i = 1; i <= 6; i++) await proxy.get(`/api/v1/projects/${project}/runs?per_page=100&page=${i}`, m.token); // evictions
  await emulator.faults({ rate_limit: { after_n: 0, retry_after_s: 1 } });
  // A list no page held answers (derived answers would answer a page of one held).
  await proxy.get(`/api/v1/projects/${project}/runs?per_page=25&is_closed=1`, m.token); // relayed 429
  await emulator.clearFaults();
  await until(async () => (text = await scrape()).includes('outcome="passthrough"'));
});

afterAll(async () => {
  await proxy?.close();
  await redis?.stop();
  await emulator?.close();
});

describe('tm_cache_requests_total', () => {
  it('counts each outcome under its own label, with the status class answered', () => {
    expect(requests('miss', 'none', 'listMilestones', '2xx')).toBe(1);
    expect(requests('hit', 'memory', 'listMilestones', '2xx')).toBe(1);
    expect(requests('miss', 'none', 'listRuns', '2xx')).toBeGreaterThanOrEqual(1);
    expect(requests('coalesced', 'none', 'listRuns', '2xx')).toBe(2);
    expect(requests('bypass', 'none', 'unknown', '2xx')).toBe(1);
    expect(requests('error', 'none', 'invalid', '4xx')).toBe(1);
    expect(requests('miss', 'none', 'listUsers', '4xx')).toBe(1);
    expect(requests('miss', 'none', 'getProject', '4xx')).toBe(1);
    expect(requests('bypass', 'none', 'listProjects', '4xx')).toBe(1);
    expect(requests('miss', 'none', 'listRuns', '429')).toBe(1);
    expect(requests('passthrough', 'none', 'passthrough', '4xx')).toBe(1);
  });

  it('has a duration histogram for every request, by outcome and operation, in seconds', () => {
    const count = sample('tm_cache_request_duration_seconds_count', 'outcome="hit",operation="listMilestones"');
    expect(count).toBe(1);
    expect(sample('tm_cache_request_duration_seconds_bucket', 'outcome="hit",operation="listMilestones",le="+Inf"')).toBe(1);
    expect(sample('tm_cache_request_duration_seconds_sum', 'outcome="hit",operation="listMilestones"')).toBeLessThan(1);
    expect(text).toMatch(/^# TYPE tm_cache_request_duration_seconds histogram$/m);
    // Buckets are cumulative.
    const buckets = text
      .split('\n')
      .filter((l) => l.startsWith('tm_cache_request_duration_seconds_bucket{outcome="passthrough"'))
      .map((l) => Number(l.split(' ').at(-1)));
    expect(buckets.length).toBeGreaterThan(5);
    expect([...buckets].sort((a, b) => a - b)).toEqual(buckets);
  });
});

describe('upstream, Redis, identity and eviction families', () => {
  it('counts upstream answers by status class, 429 on its own, and times them', () => {
    expect(sample('tm_cache_upstream_responses_total', 'status_class="429"')).toBe(1);
    expect(sample('tm_cache_upstream_responses_total', 'status_class="4xx"')).toBeGreaterThanOrEqual(3);
    expect(sample('tm_cache_upstream_responses_total', 'status_class="2xx"')).toBeGreaterThanOrEqual(4);
    expect(sample('tm_cache_upstream_request_duration_seconds_count', 'operation="getCurrentUser",status_class="2xx"')).toBeGreaterThanOrEqual(1);
    expect(sample('tm_cache_upstream_request_duration_seconds_count', 'operation="listRuns",status_class="429"')).toBe(1);
  });

  it('times Redis commands by kind and exposes errors as a counter and its state as a gauge', () => {
    expect(sample('tm_cache_redis_command_duration_seconds_count', 'command="get"')).toBeGreaterThan(0);
    expect(sample('tm_cache_redis_command_duration_seconds_count', 'command="set"')).toBeGreaterThan(0);
    expect(text).toMatch(/^# TYPE tm_cache_redis_errors_total counter$/m);
    expect(sample('tm_cache_redis_up')).toBe(1);
  });

  it('counts identity look-ups by result', () => {
    expect(sample('tm_cache_identity_lookups_total', 'result="upstream"')).toBeGreaterThanOrEqual(2);
    expect(sample('tm_cache_identity_lookups_total', 'result="refused"')).toBe(1);
    expect(sample('tm_cache_identity_lookups_total', 'result="memo"')).toBeGreaterThan(5);
  });

  it('counts evictions from the memory tier', () => {
    expect(sample('tm_cache_evictions_total', 'tier="memory"')).toBeGreaterThan(0);
  });

  it('reports readiness, upstream state, bytes, build info', () => {
    expect(sample('tm_cache_ready')).toBe(1);
    expect(sample('tm_cache_upstream_up')).toBe(1);
    expect(sample('tm_cache_bytes_sent_total')).toBeGreaterThan(1_000);
    expect(text).toMatch(/^tm_cache_build_info\{version="\d+\.\d+\.\d+[^"]*",node="v\d+\.\d+\.\d+"\} 1$/m);
  });
});

describe('conventions', () => {
  it("exposes Node's default metrics under their standard names", () => {
    for (const name of ['process_cpu_seconds_total', 'process_resident_memory_bytes', 'nodejs_heap_size_used_bytes', 'nodejs_eventloop_lag_seconds']) {
      expect(text, name).toMatch(new RegExp(`^${name} `, 'm'));
    }
    expect(text).not.toContain('tm_cache_process_');
  });

  it("samples the event loop's delay every 100 ms, not prom-client's 10: an idle replica is not woken 100 times a second", () => {
    // The histogram records the interval between two samples: about the sampling interval at least
    // (0.01 s at prom-client's default; a timer may fire a few ms early after a late one, hence
    // the margin). With no sample yet its minimum would be huge: bounded above too.
    const min = sample('nodejs_eventloop_lag_min_seconds');
    expect(min).toBeGreaterThanOrEqual(0.05);
    expect(min).toBeLessThan(10);
  });

  it('names every counter _total and every histogram _seconds, and no label carries a credential or a user id', () => {
    const types = [...text.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((m) => [m[1]!, m[2]!] as const);
    for (const [name, type] of types.filter(([n]) => n.startsWith('tm_cache_'))) {
      if (type === 'counter') expect(name).toMatch(/_total$/);
      if (type === 'histogram') expect(name).toMatch(/_seconds$/);
    }
    for (const t of emulator.tokens.all) expect(text).not.toContain(t.token);
    expect(text).not.toContain('not-a-token');
    expect(text).not.toMatch(/user(_id)?="/);
  });
});
