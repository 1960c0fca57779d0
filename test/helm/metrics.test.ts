/**
 * Every metric the Grafana dashboard and the PrometheusRule query is one that a real tm-cache
 * exposes on /metrics: a proxy with Redis configured, in front of the emulator, after a few
 * requests, and one serving TLS (whose certificate families exist only then). A family with labels but no sample yet still prints its `# TYPE` line, so families
 * are read from those; a histogram answers to its _bucket, _sum and _count series.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { startTestEmulator, type TestEmulator } from '../helpers/emulator.js';
import { SCRAPE_SERIES, metricNames } from '../helpers/metrics.js';
import { TestCa } from '../helpers/pki.js';
import { startTestProxy, type TestProxy } from '../helpers/proxy.js';
import { startRedis, type RedisHandle } from '../helpers/redis.js';
import { renderChart } from './render.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const CHART = join(ROOT, 'helm/tm-cache');

/** Families of a Prometheus text exposition, with the series names each answers to. */
function exposedSeries(text: string): Set<string> {
  const series = new Set<string>();
  for (const [, name, type] of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
    series.add(name!);
    if (type === 'histogram') for (const suffix of ['_bucket', '_sum', '_count']) series.add(name! + suffix);
    if (type === 'summary') for (const suffix of ['_sum', '_count']) series.add(name! + suffix);
  }
  return series;
}

interface Panel {
  title?: string;
  targets?: { expr?: string }[];
  panels?: Panel[];
}

function dashboardQueries(): { where: string; expr: string }[] {
  const dashboard = JSON.parse(readFileSync(join(CHART, 'dashboards/tm-cache.json'), 'utf8')) as {
    panels: Panel[];
    templating: { list: { name: string; definition?: string }[] };
  };
  const fromPanels = (panels: Panel[]): { where: string; expr: string }[] =>
    panels.flatMap((p) => [
      ...(p.targets ?? []).flatMap((t) => (t.expr === undefined ? [] : [{ where: `panel "${p.title}"`, expr: t.expr }])),
      ...fromPanels(p.panels ?? []),
    ]);
  const variables = dashboard.templating.list.flatMap((v) => (v.definition === undefined ? [] : [{ where: `variable $${v.name}`, expr: v.definition }]));
  return [...fromPanels(dashboard.panels), ...variables];
}

function ruleQueries(): { where: string; expr: string }[] {
  const values = parseYaml(readFileSync(join(CHART, 'ci/all-features-values.yaml'), 'utf8')) as object;
  const rule = renderChart(CHART, [values]).find('PrometheusRule');
  const rules = rule['spec']['groups'].flatMap((g: { rules: object[] }) => g.rules) as { alert: string; expr: string }[];
  return rules.map((r) => ({ where: `alert ${r.alert}`, expr: r.expr }));
}

describe('metricNames', () => {
  it('finds the metrics of an expression, not its functions, labels, matchers, ranges or variables', () => {
    const expr =
      'histogram_quantile(0.99, sum by (le, op) (rate(foo_bucket{a="b",c=~"x|y"}[$__rate_interval]))) / bar_total > 0.5 and absent(baz) or (sum(qux{j=~"$job"}) or vector(0)) == 0';
    expect(metricNames(expr).sort()).toEqual(['bar_total', 'baz', 'foo_bucket', 'qux']);
    expect(metricNames('label_values(tm_cache_build_info{namespace=~"$namespace"}, job)')).toEqual(['tm_cache_build_info']);
  });

  it('reads a histogram family from its TYPE line even without samples', () => {
    const series = exposedSeries('# HELP h x\n# TYPE h histogram\n# TYPE c_total counter\n');
    expect([...series].sort()).toEqual(['c_total', 'h', 'h_bucket', 'h_count', 'h_sum']);
  });
});

describe('the dashboard and the alert rules', () => {
  let emulator: TestEmulator;
  let redis: RedisHandle;
  let proxy: TestProxy;
  let exposed: Set<string>;

  beforeAll(async () => {
    emulator = await startTestEmulator();
    redis = await startRedis();
    proxy = await startTestProxy(emulator.url, { cache: { redis: { url: redis.url, commandTimeoutMs: 2_000 } } });
    const { token, project_ids } = emulator.tokens.member(0);
    const path = `/api/v1/projects/${project_ids[0]}/runs?per_page=15`;
    expect((await proxy.get(path, token)).status).toBe(200); // a miss: upstream, Redis, identity lookup
    expect((await proxy.get(path, token)).status).toBe(200); // a hit
    expect((await proxy.get('/api/v1/user')).status).toBe(401); // no credential: passed through
    const res = await fetch(`${proxy.managementUrl}/metrics`);
    expect(res.status).toBe(200);
    exposed = exposedSeries(await res.text());
    // The certificate's families: a replica serving TLS (management over plain HTTP, to read it here).
    const dir = mkdtempSync(join(tmpdir(), 'tm-cache-metrics-tls-'));
    try {
      const pair = new TestCa(dir).issue('server');
      const tlsProxy = await startTestProxy(emulator.url, { server: { tls: { certFile: pair.cert, keyFile: pair.key, management: false } } });
      const text = await (await fetch(`${tlsProxy.managementUrl}/metrics`)).text();
      await tlsProxy.close();
      for (const name of exposedSeries(text)) exposed.add(name);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  afterAll(async () => {
    await proxy?.close();
    await redis?.stop();
    await emulator?.close();
  });

  it('query the dashboard and the rules at all (the extraction finds names)', () => {
    const names = [...dashboardQueries(), ...ruleQueries()].flatMap((q) => metricNames(q.expr));
    expect(names).toContain('tm_cache_requests_total');
    expect(names).toContain('tm_cache_request_duration_seconds_bucket');
  });

  it('query only metrics that /metrics exposes', () => {
    const missing = [...dashboardQueries(), ...ruleQueries()].flatMap((q) =>
      metricNames(q.expr)
        .filter((name) => !exposed.has(name) && !SCRAPE_SERIES.has(name))
        .map((name) => `${name} (${q.where})`),
    );
    expect([...new Set(missing)]).toEqual([]);
  });
});
