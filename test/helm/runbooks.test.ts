/**
 * Every alert of the chart's PrometheusRule links a section of docs/runbooks.md that exists (the
 * anchor as GitHub makes it from the heading), and queries only metrics tm-cache's registry
 * declares (every family, those registered only with Redis, TLS or a budget included) or that
 * Prometheus makes itself (`up`).
 */
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { createMetrics } from '../../src/ops/metrics.js';
import { SCRAPE_SERIES, metricNames } from '../helpers/metrics.js';
import { renderChart } from './render.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const CHART = join(ROOT, 'helm/tm-cache');

interface Rule {
  alert: string;
  expr: string;
  annotations: Record<string, string>;
}

function rulesOf(values: object[]): Rule[] {
  const rule = renderChart(CHART, values).find('PrometheusRule');
  return rule['spec']['groups'].flatMap((g: { rules: Rule[] }) => g.rules) as Rule[];
}

const allFeatures = parseYaml(readFileSync(join(CHART, 'ci/all-features-values.yaml'), 'utf8')) as object;
const sidecar = parseYaml(readFileSync(join(CHART, 'ci/sidecar-values.yaml'), 'utf8')) as object;
const RULES = rulesOf([allFeatures]);

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens; a repeat gets -1, -2, … */
function githubAnchors(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  const body = markdown.replace(/^```[\s\S]*?^```/gm, '');
  for (const [, text] of body.matchAll(/^#{1,6}\s+(.+?)\s*#*\s*$/gm)) {
    const base = text!
      .replace(/`/g, '')
      .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/\s/g, '-');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    anchors.add(n === 0 ? base : `${base}-${n}`);
  }
  return anchors;
}

/** The series names tm-cache's registry declares, with every optional family registered (their readers never called). */
function registeredSeries(): Set<string> {
  const metrics = createMetrics({ version: 'test', redis: true });
  const unread = (() => {
    throw new Error('not read here');
  }) as never;
  metrics.watchReadiness(unread);
  metrics.watchMemos(unread);
  metrics.watchServing({} as never);
  metrics.watchRedis({} as never);
  metrics.watchCertificate(unread);
  metrics.watchBudget(unread);
  const series = new Set<string>();
  for (const metric of metrics.registry.getMetricsAsArray() as unknown as { name: string; type: string }[]) {
    series.add(metric.name);
    if (metric.type === 'histogram') for (const suffix of ['_bucket', '_sum', '_count']) series.add(metric.name + suffix);
  }
  return series;
}

describe('githubAnchors', () => {
  it('makes the anchors GitHub makes', () => {
    expect([
      ...githubAnchors('# Runbooks: the alerts\n## TmCacheFleetPaused\n```\n# not a heading\n```\n## `code` and [a link](x.md)\n## Again\n## Again\n'),
    ]).toEqual(['runbooks-the-alerts', 'tmcachefleetpaused', 'code-and-a-link', 'again', 'again-1']);
  });
});

describe("the PrometheusRule's alerts", () => {
  const anchors = githubAnchors(readFileSync(join(ROOT, 'docs/runbooks.md'), 'utf8'));

  it('are there to check, the fleet budget and certificate alerts among them', () => {
    expect(RULES.map((r) => r.alert)).toEqual(
      expect.arrayContaining(['TmCacheFleetPaused', 'TmCacheBudgetRefusals', 'TmCacheLockoutNear', 'TmCacheBudgetRateLow', 'TmCacheCertificateExpiring']),
    );
  });

  it.each([
    ['standalone', [allFeatures]],
    ['sidecar', [sidecar, { metrics: { prometheusRule: { enabled: true } } }]],
  ])('each carry a runbook_url whose anchor is a heading of docs/runbooks.md (%s)', (_mode, values) => {
    for (const rule of rulesOf(values)) {
      const url = rule.annotations['runbook_url'];
      expect(url, rule.alert).toBe(`docs/runbooks.md#${rule.alert.toLowerCase()}`);
      expect(anchors, `${rule.alert}: ${url}`).toContain(url!.split('#')[1]);
    }
  });

  it('link runbookBaseUrl, with or without its trailing slash', () => {
    for (const base of ['https://git.example.com/qa/tm-cache/-/blob/main/docs', 'https://git.example.com/qa/tm-cache/-/blob/main/docs/']) {
      const rules = rulesOf([allFeatures, { metrics: { prometheusRule: { runbookBaseUrl: base } } }]);
      expect(rules.map((r) => r.annotations['runbook_url'])).toEqual(
        rules.map((r) => `https://git.example.com/qa/tm-cache/-/blob/main/docs/runbooks.md#${r.alert.toLowerCase()}`),
      );
    }
  });

  it("query only metrics tm-cache's registry declares", () => {
    const registered = registeredSeries();
    expect(registered).toContain('tm_cache_upstream_budget_ceiling');
    const names = RULES.flatMap((r) => metricNames(r.expr).map((name) => ({ alert: r.alert, name })));
    expect(names.map((n) => n.name)).toContain('tm_cache_tls_certificate_expiry_timestamp_seconds');
    expect(names.filter(({ name }) => !registered.has(name) && !SCRAPE_SERIES.has(name))).toEqual([]);
  });
});
