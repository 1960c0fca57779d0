import { describe, expect, it } from 'vitest';
import { buildManagement } from '../../src/ops/management.js';
import { createMetrics } from '../../src/ops/metrics.js';
import type { ReadinessCheck } from '../../src/ops/readiness.js';

function check(name: string, status: 'ok' | 'degraded' | 'down'): ReadinessCheck {
  return { name, check: () => ({ status, detail: `${name} is ${status}` }) };
}

describe('the management port', () => {
  it('is ready when every check is ok, still ready but says so when one is degraded, not ready when one is down', async () => {
    for (const [statuses, code, overall] of [
      [['ok'], 200, 'ok'],
      [['ok', 'degraded'], 200, 'degraded'],
      [['degraded', 'down'], 503, 'down'],
    ] as const) {
      const { app } = buildManagement(
        createMetrics({ version: '0.0.0-test', redis: false }),
        statuses.map((s, i) => check(`c${i}`, s)),
      );
      const res = await app.inject('/readyz');
      expect(res.statusCode).toBe(code);
      expect(res.json().status).toBe(overall);
      await app.close();
    }
  });

  it('reports draining, not ready, once shutdown has begun, while staying alive', async () => {
    const { app, startDraining } = buildManagement(createMetrics({ version: '0.0.0-test', redis: false }), []);
    startDraining();
    expect((await app.inject('/readyz')).json()).toMatchObject({ status: 'draining' });
    expect((await app.inject('/readyz')).statusCode).toBe(503);
    expect((await app.inject('/healthz')).statusCode).toBe(200);
    await app.close();
  });

  it('exposes request outcomes as a Prometheus counter labelled by outcome, tier, operation and status class only', async () => {
    const metrics = createMetrics({ version: '0.0.0-test', redis: false });
    for (let i = 0; i < 3; i++) metrics.request('hit', 'memory', 'listRuns', 200, 0.0001);
    metrics.request('miss', 'none', 'getRun', 404, 0.002);
    const { app } = buildManagement(metrics, []);
    const text = (await app.inject('/metrics')).body;
    expect(text).toContain('tm_cache_requests_total{outcome="hit",tier="memory",operation="listRuns",status_class="2xx"} 3');
    expect(text).toContain('tm_cache_requests_total{outcome="miss",tier="none",operation="getRun",status_class="4xx"} 1');
    // Scraping twice does not count twice.
    expect((await app.inject('/metrics')).body).toContain('operation="listRuns",status_class="2xx"} 3');
    await app.close();
  });
});
