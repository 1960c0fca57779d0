/**
 * The control plane under /__emulator/ (a public contract: tests, benchmarks and the CLI use
 * these names). Its calls are never counted in stats and never hit by faults. Route schemas check
 * the bodies (ajv options in app.ts); this plugin's error handler answers their rejections.
 */
import type { FastifyError, FastifyInstance, FastifyReply } from 'fastify';
import { makeErrorBody } from '../api/errors.js';
import { sendJson } from './api.js';
import { ControlError, schemaErrorBody } from './control-error.js';
import { FaultsSchema, type Faults } from './faults.js';
import { MutationSchema, applyMutation } from './mutations.js';
import type { EmulatorState } from './state.js';

const CONTROL_PREFIX = '/__emulator';

function answer(reply: FastifyReply, run: () => unknown): FastifyReply {
  try {
    return sendJson(reply, 200, JSON.stringify(run()));
  } catch (err) {
    if (err instanceof ControlError) return sendJson(reply, err.status, err.toBody());
    throw err;
  }
}

export async function controlPlugin(app: FastifyInstance, opts: { state: EmulatorState }): Promise<void> {
  const { state } = opts;
  app.get(`${CONTROL_PREFIX}/tokens`, (_req, reply) => answer(reply, () => state.tokens()));
  app.get(`${CONTROL_PREFIX}/stats`, (_req, reply) => answer(reply, () => state.stats.snapshot()));
  app.post(`${CONTROL_PREFIX}/stats/reset`, (_req, reply) =>
    answer(reply, () => {
      state.stats.reset();
      return state.stats.snapshot();
    }),
  );
  app.get(`${CONTROL_PREFIX}/faults`, (_req, reply) => answer(reply, () => state.faults.current()));
  app.put(`${CONTROL_PREFIX}/faults`, { schema: { body: FaultsSchema } }, (req, reply) =>
    answer(reply, () => {
      state.faults.set(req.body as Faults);
      return state.faults.current();
    }),
  );
  app.delete(`${CONTROL_PREFIX}/faults`, (_req, reply) =>
    answer(reply, () => {
      state.faults.clear();
      return state.faults.current();
    }),
  );
  app.post(`${CONTROL_PREFIX}/mutations`, { schema: { body: MutationSchema } }, (req, reply) => answer(reply, () => applyMutation(state, req.body)));
  // Registered inside this plugin, so it handles control-plane errors only.
  app.setErrorHandler((err: FastifyError, _req, reply) => {
    if (err.validation?.[0]) return sendJson(reply, 400, schemaErrorBody(err.validation[0]));
    // Malformed JSON and the like: naming the body.
    const status = err.statusCode !== undefined && err.statusCode >= 400 && err.statusCode < 500 ? err.statusCode : 500;
    return sendJson(reply, status, makeErrorBody(err.message, { body: [err.message] }));
  });
}
