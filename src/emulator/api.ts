/**
 * The /api/v1 surface. Per request, in this order:
 *   stats → faults → route (unknown path: 404) → auth (401) → parameters (400/422)
 *   → admin (403) → existence and access (404/403) → a denied area (403) → 200.
 * GET and HEAD read; POST/PUT/PATCH/DELETE on a catalogued path answer 204 after auth (a write
 * target for the proxy's passthrough); any other method answers 405.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { API_PREFIX } from '../api/catalogue.js';
import { ValidationError, makeErrorBody, type ErrorBody } from '../api/errors.js';
import { normalizeRequest } from '../api/normalize.js';
import { matchRoute, type RouteMatch } from '../api/route.js';
import { HttpError, runOperation } from './operations.js';
import type { EmulatorState } from './state.js';
import { MALFORMED_ROUTE, UNMATCHED_ROUTE } from './stats.js';

const JSON_TYPE = 'application/json; charset=utf-8';
const READ_METHODS = new Set(['GET', 'HEAD']);
const WRITE_METHODS = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

export function sendJson(reply: FastifyReply, status: number, body: string | ErrorBody): FastifyReply {
  return reply
    .code(status)
    .type(JSON_TYPE)
    .send(typeof body === 'string' ? body : JSON.stringify(body));
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function bearerToken(request: FastifyRequest): string | undefined {
  const m = /^Bearer\s+(\S+)\s*$/i.exec(request.headers.authorization ?? '');
  return m?.[1];
}

/** The route match, undefined for an unknown path, or the 400 of a malformed path id. */
function resolve(pathname: string): RouteMatch | ValidationError | undefined {
  try {
    return matchRoute(pathname);
  } catch (err) {
    if (err instanceof ValidationError) return err;
    throw err;
  }
}

function routeKey(method: string, match: RouteMatch | ValidationError | undefined): string {
  if (match === undefined) return `${method} ${UNMATCHED_ROUTE}`;
  if (match instanceof ValidationError) return `${method} ${MALFORMED_ROUTE}`;
  return `${method} ${API_PREFIX}${match.op.path}`;
}

/** Applies injected faults; answers true when the request was already dealt with. */
async function injectFaults(state: EmulatorState, request: FastifyRequest, reply: FastifyReply): Promise<boolean> {
  const delay = state.faults.delayMs();
  if (delay > 0) await sleep(delay);
  const action = state.faults.decide(state.nowMs());
  switch (action.kind) {
    case 'none':
      return false;
    case 'down':
      reply.hijack();
      request.raw.socket.destroy();
      return true;
    case 'rate_limited':
      state.stats.recordRateLimited(action.escalation);
      reply.header('retry-after', String(action.retryAfterS));
      sendJson(reply, 429, makeErrorBody('Too Many Requests.'));
      return true;
    case 'error':
      sendJson(reply, action.status, makeErrorBody('Injected fault.'));
      return true;
  }
}

/**
 * The instance's CORS (the control plane's `cors` option): an allowed origin is reflected with
 * `Vary: Origin` on every answer, or (`any_origin`) every request answered
 * `Access-Control-Allow-Origin: *` without Vary; a preflight (OPTIONS with
 * Access-Control-Request-Method) is answered here; answers true when it was a preflight.
 */
function answerCors(state: EmulatorState, request: FastifyRequest, reply: FastifyReply): boolean {
  if (!state.faults.corsEnabled()) return false;
  const origin = request.headers.origin;
  const cors = state.faults.corsHeaders(origin);
  if (state.faults.corsVaries()) reply.header('vary', 'Origin');
  if (cors !== undefined) reply.headers(cors);
  if (request.method !== 'OPTIONS' || request.headers['access-control-request-method'] === undefined) return false;
  if (cors !== undefined) {
    reply.headers({ 'access-control-allow-methods': 'GET, HEAD', 'access-control-allow-headers': 'Authorization', 'access-control-max-age': '600' });
  }
  void reply.code(204).send();
  return true;
}

async function handle(state: EmulatorState, request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply | void> {
  const url = request.raw.url ?? '/';
  const q = url.indexOf('?');
  const pathname = q < 0 ? url : url.slice(0, q);
  const method = request.method;
  const match = resolve(pathname);
  const token = bearerToken(request);
  state.stats.record(routeKey(method, match), token, state.nowMs());
  if (await injectFaults(state, request, reply)) return;
  if (answerCors(state, request, reply)) return;

  if (match === undefined) return sendJson(reply, 404, makeErrorBody('Not found.', { path: [`No operation at ${pathname}.`] }));
  if (!READ_METHODS.has(method) && !WRITE_METHODS.has(method)) {
    reply.header('allow', 'GET, HEAD, POST, PUT, PATCH, DELETE');
    return sendJson(reply, 405, makeErrorBody('Method not allowed.', { method: [`${method} is not supported.`] }));
  }
  const caller = state.authenticate(token);
  if (!caller) return sendJson(reply, 401, makeErrorBody('Unauthenticated.'));
  if (match instanceof ValidationError) return sendJson(reply, match.status, match.toBody());
  if (WRITE_METHODS.has(method)) return reply.code(204).send();
  return answerRead(state, caller.userId, match, q < 0 ? '' : url.slice(q + 1), reply);
}

function answerRead(state: EmulatorState, userId: number, match: RouteMatch, rawQuery: string, reply: FastifyReply): FastifyReply {
  try {
    const req = normalizeRequest(match.op, match.ids, rawQuery);
    if (match.op.adminOnly && !state.isAdmin(userId)) {
      return sendJson(reply, 403, makeErrorBody('This action requires site admin access.'));
    }
    return sendJson(reply, 200, runOperation({ world: state, userId, req }));
  } catch (err) {
    if (err instanceof ValidationError) return sendJson(reply, err.status, err.toBody());
    if (err instanceof HttpError) return sendJson(reply, err.status, err.body);
    throw err;
  }
}

/** Registers /api/v1/* in its own scope: request bodies of any type are accepted unparsed. */
export async function apiPlugin(app: FastifyInstance, opts: { state: EmulatorState }): Promise<void> {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));
  app.all(`${API_PREFIX}/*`, (request, reply) => handle(opts.state, request, reply));
}
