/**
 * The management port: `/healthz` (the process is alive), `/readyz` (it can serve: a Redis that
 * is down only degrades it, since the memory tier still serves; the upstream's last known state is
 * reported, and makes it not ready only with `health.requireUpstream`), `/metrics`, and the admin
 * API with the status page (admin.ts). Kept off the proxy port so it is never exposed with it.
 */
import fastify, { type FastifyInstance } from 'fastify';
import type { ServerOptions as SecureServerOptions } from 'node:https';
import { registerAdmin, type AdminDeps } from './admin.js';
import type { Metrics } from './metrics.js';
import type { ReadinessCheck } from './readiness.js';

export interface Management {
  readonly app: FastifyInstance;
  /** From now on /readyz answers 503 `draining`, so load balancers stop sending traffic. */
  startDraining(): void;
}

/** `tls`: HTTPS options (`server.tls` with `server.tls.management`); absent: plain HTTP. */
export function buildManagement(metrics: Metrics, checks: readonly ReadinessCheck[], admin?: AdminDeps, tls?: SecureServerOptions): Management {
  const app = (tls
    ? fastify({ logger: false, bodyLimit: 64 * 1024, https: tls })
    : fastify({ logger: false, bodyLimit: 64 * 1024 })) as unknown as FastifyInstance;
  let draining = false;
  const readiness = () => {
    const results: Record<string, { status: string; detail?: string }> = {};
    for (const c of checks) results[c.name] = c.check();
    const down = draining || Object.values(results).some((r) => r.status === 'down');
    const degraded = Object.values(results).some((r) => r.status === 'degraded');
    const status = draining ? 'draining' : down ? 'down' : degraded ? 'degraded' : 'ok';
    return { ready: !down, status, checks: results };
  };
  metrics.watchReadiness(() => readiness().ready);
  app.get('/healthz', async () => ({ status: 'ok' }));
  app.get('/readyz', async (_req, reply) => {
    for (const c of checks) c.refresh?.();
    const { ready, status, checks: results } = readiness();
    return reply.code(ready ? 200 : 503).send({ status, checks: results });
  });
  app.get('/metrics', async (_req, reply) => {
    reply.header('content-type', metrics.registry.contentType);
    return metrics.registry.metrics();
  });
  if (admin) registerAdmin(app, admin);
  return {
    app,
    startDraining: () => {
      draining = true;
    },
  };
}
