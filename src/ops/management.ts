/**
 * The management port: `/healthz` (the process is alive), `/readyz` (it can serve: the upstream
 * client is open; a Redis that is down only degrades it, since the memory tier still serves) and
 * `/metrics`. Kept off the proxy port so it is never exposed with it.
 */
import fastify, { type FastifyInstance } from 'fastify';
import type { Metrics } from './metrics.js';

export interface ReadinessCheck {
  readonly name: string;
  /** `ok`, or `degraded` (still ready, reported in the body), or `down` (not ready). */
  check(): { status: 'ok' | 'degraded' | 'down'; detail?: string };
}

export interface Management {
  readonly app: FastifyInstance;
  /** From now on /readyz answers 503 `draining`, so load balancers stop sending traffic. */
  startDraining(): void;
}

export function buildManagement(metrics: Metrics, checks: readonly ReadinessCheck[]): Management {
  const app = fastify({ logger: false });
  let draining = false;
  app.get('/healthz', async () => ({ status: 'ok' }));
  app.get('/readyz', async (_req, reply) => {
    const results: Record<string, { status: string; detail?: string }> = {};
    for (const c of checks) results[c.name] = c.check();
    const down = draining || Object.values(results).some((r) => r.status === 'down');
    const degraded = Object.values(results).some((r) => r.status === 'degraded');
    const status = draining ? 'draining' : down ? 'down' : degraded ? 'degraded' : 'ok';
    return reply.code(down ? 503 : 200).send({ status, checks: results });
  });
  app.get('/metrics', async (_req, reply) => {
    reply.header('content-type', metrics.registry.contentType);
    return metrics.registry.metrics();
  });
  return {
    app,
    startDraining: () => {
      draining = true;
    },
  };
}
