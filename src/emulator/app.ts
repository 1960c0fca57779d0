/**
 * buildEmulator: the reference instance of the Read API as a fastify app that never listens
 * (tests use port 0 through server.ts, or `inject`). `/api/v1` is in api.ts, the control plane
 * in control.ts; both share one EmulatorState.
 */
import Fastify, { type FastifyInstance } from 'fastify';
import { makeErrorBody } from '../api/errors.js';
import { apiPlugin, sendJson } from './api.js';
import { controlPlugin } from './control.js';
import { SCALES, type DatasetOptions } from './model.js';
import { EmulatorState, type WallClock } from './state.js';

export interface EmulatorOptions extends DatasetOptions {
  /** Default Date.now; tests pass a fake clock to step through rates and lockouts exactly. */
  readonly nowMs?: WallClock;
}

/** The state behind an app built by buildEmulator, for in-process callers (bench, CLI). */
const STATES = new WeakMap<FastifyInstance, EmulatorState>();

export function emulatorState(app: FastifyInstance): EmulatorState | undefined {
  return STATES.get(app);
}

function assertEmulatorOptions(opts: EmulatorOptions): void {
  if (!Number.isSafeInteger(opts.seed)) throw new Error(`emulator seed must be an integer, got ${String(opts.seed)}`);
  if (!SCALES.includes(opts.scale)) throw new Error(`emulator scale must be one of ${SCALES.join(', ')}, got ${String(opts.scale)}`);
}

export async function buildEmulator(opts: EmulatorOptions): Promise<FastifyInstance> {
  assertEmulatorOptions(opts);
  const state = EmulatorState.generate({ seed: opts.seed, scale: opts.scale }, opts.nowMs);
  // No logger: the emulator prints nothing; its stats endpoint is how one observes it.
  // ajv, for the control plane's body schemas: reject rather than coerce ("5" is not an id) or
  // silently drop unknown fields (a typo must not do nothing), and allow the discriminator on op.
  const ajv = { customOptions: { coerceTypes: false, removeAdditional: false, discriminator: true } };
  const app = Fastify({ logger: false, forceCloseConnections: true, ajv });
  STATES.set(app, state);
  await app.register(apiPlugin, { state });
  await app.register(controlPlugin, { state });
  app.setNotFoundHandler((req, reply) => sendJson(reply, 404, makeErrorBody('Not found.', { path: [`No route ${req.method} ${req.url.split('?')[0]}.`] })));
  await app.ready();
  return app;
}
