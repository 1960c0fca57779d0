/**
 * The control plane under /__emulator/ (a public contract: tests, benchmarks and the CLI use
 * these names). Its calls are never counted in stats and never hit by faults.
 */
import type { FastifyInstance, FastifyReply } from 'fastify';
import { makeErrorBody } from '../api/errors.js';
import { sendJson } from './api.js';
import { ControlError } from './control-error.js';
import { parseFaults } from './faults.js';
import { applyMutation } from './mutations.js';
import type { EmulatorState } from './state.js';

export const CONTROL_PREFIX = '/__emulator';

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
  app.put(`${CONTROL_PREFIX}/faults`, (req, reply) =>
    answer(reply, () => {
      state.faults.set(parseFaults(req.body));
      return state.faults.current();
    }),
  );
  app.delete(`${CONTROL_PREFIX}/faults`, (_req, reply) =>
    answer(reply, () => {
      state.faults.clear();
      return state.faults.current();
    }),
  );
  app.post(`${CONTROL_PREFIX}/mutations`, (req, reply) => answer(reply, () => applyMutation(state, req.body)));
  // Malformed JSON and the like: the API's error shape, naming the body.
  app.setErrorHandler((err: { statusCode?: number; message: string }, _req, reply) => {
    const status = err.statusCode !== undefined && err.statusCode >= 400 && err.statusCode < 500 ? err.statusCode : 500;
    return sendJson(reply, status, makeErrorBody(err.message, { body: [err.message] }));
  });
}
