/**
 * Who may use the admin API: decided on the route that matched, never on the URL string.
 *
 * The guard is an `onRequest` hook added inside the admin routes' own encapsulated plugin, so it
 * runs for exactly the routes of that plugin, after the router has decoded and matched the path:
 * `/%61dmin/stats`, an absolute-form request line or a HEAD reach the same route and the same
 * check. Anything the router does not match is the management port's 404.
 *
 * - `admin.token` empty (the default): every admin route answers 404, as if it did not exist.
 * - A route marked public (the status page, which holds no figure and asks for the token itself)
 *   needs no token; every other route needs `Authorization: Bearer <admin.token>`, compared in
 *   constant time.
 * - `admin.viewerToken` (optional) is read-only: it opens the routes marked `viewer` (the figures
 *   behind the status page, for a wall screen) and is answered 403, with a JSON body naming the
 *   rule, on every other (purges, entries: what changes the cache or shows who asked for what).
 * - A failed authentication is counted (`tm_cache_admin_auth_failures_total`) and logged at most
 *   once per `LOG_EVERY_MS` with how many were not logged, never with what was presented. A
 *   source address with `MAX_FAILURES` failures within `FAILURE_WINDOW_MS` is answered 429 with
 *   `Retry-After` until its window ends, without its token being looked at: guessing is slowed to
 *   `MAX_FAILURES` a minute per address.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { LRUCache } from 'lru-cache';
import type { Logger } from 'pino';

export const MAX_FAILURES = 10;
const FAILURE_WINDOW_MS = 60_000;
const LOG_EVERY_MS = 10_000;
/** Source addresses remembered at most; an address forgotten starts a new window. */
const MAX_SOURCES = 10_000;

export interface AdminGuardDeps {
  /** The current `admin.token` (reloadable); empty: the admin API is off. */
  readonly token: () => string;
  /** The current `admin.viewerToken` (reloadable); empty: no viewer token. */
  readonly viewerToken: () => string;
  readonly logger: Logger;
  readonly now: () => number;
  readonly failed: () => void;
}

/** Route config that marks a route as readable without the token (while the API is on). */
export interface AdminRouteConfig {
  readonly public?: boolean;
  /** Readable with the viewer token too (it changes nothing and names no caller). */
  readonly viewer?: boolean;
}

/** What a viewer is told on a route that is not theirs: the rule, by name, and what to use instead. */
const VIEWER_REFUSED = {
  message: 'The viewer token (admin.viewerToken) is read-only: it may read GET /admin/stats and the status page, not this route. Use admin.token.',
  errors: { authorization: ['admin.viewerToken is read-only: only routes marked viewer (GET /admin/stats, GET /) accept it'] },
};

interface Failures {
  count: number;
  windowEndsAt: number;
}

export class AdminGuard {
  readonly #failures = new LRUCache<string, Failures>({ max: MAX_SOURCES });
  #lastLogAt = -Infinity;
  #unlogged = 0;

  constructor(private readonly deps: AdminGuardDeps) {}

  /** The `onRequest` hook of the admin plugin. */
  readonly check = async (request: FastifyRequest, reply: FastifyReply): Promise<void> => {
    const token = this.deps.token();
    if (token === '') {
      return reply.code(404).send({ message: 'Not found: the admin API is off (set admin.token to enable it).', errors: {} });
    }
    if ((request.routeOptions.config as AdminRouteConfig | undefined)?.public === true) return;
    const now = this.deps.now();
    const source = request.socket.remoteAddress ?? 'unknown';
    const failures = this.#failures.get(source);
    if (failures !== undefined && now < failures.windowEndsAt && failures.count >= MAX_FAILURES) {
      const retryAfterS = Math.max(1, Math.ceil((failures.windowEndsAt - now) / 1000));
      return reply
        .code(429)
        .header('retry-after', String(retryAfterS))
        .send({
          message: `Too many failed admin authentications from this address: try again in ${retryAfterS} s.`,
          errors: {},
        });
    }
    const header = request.headers.authorization;
    if (isAuthorized(header, token)) return;
    const viewerToken = this.deps.viewerToken();
    if (viewerToken !== '' && isAuthorized(header, viewerToken)) {
      if ((request.routeOptions.config as AdminRouteConfig | undefined)?.viewer === true) return;
      return reply.code(403).send(VIEWER_REFUSED);
    }
    this.#fail(source, failures, now, request.method, request.routeOptions.url ?? '');
    return reply.code(401).header('www-authenticate', 'Bearer realm="tm-cache admin"').send({ message: 'The admin token is missing or wrong.', errors: {} });
  };

  #fail(source: string, failures: Failures | undefined, now: number, method: string, route: string): void {
    this.deps.failed();
    if (failures === undefined || now >= failures.windowEndsAt) this.#failures.set(source, { count: 1, windowEndsAt: now + FAILURE_WINDOW_MS });
    else failures.count++;
    if (now - this.#lastLogAt < LOG_EVERY_MS) {
      this.#unlogged++;
      return;
    }
    // The route pattern, never the URL as sent (it may carry anything) nor the credential.
    this.deps.logger.warn({ source, method, route, notLogged: this.#unlogged }, 'admin authentication failed');
    this.#lastLogAt = now;
    this.#unlogged = 0;
  }
}

/** Constant time whatever the lengths: both sides are hashed to 32 bytes first. */
function isAuthorized(header: string | undefined, token: string): boolean {
  if (header === undefined) return false;
  const match = /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(header);
  const given = createHash('sha256')
    .update(match?.[1] ?? '')
    .digest();
  const expected = createHash('sha256').update(token).digest();
  return timingSafeEqual(given, expected) && match !== null;
}
