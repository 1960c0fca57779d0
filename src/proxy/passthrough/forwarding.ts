/**
 * Which requests the cache does not answer may be passed through to the instance: only paths
 * under `upstream.forwardPrefixes` (by default `/api/`, the instance's API). Anything else (the
 * instance's web UI, its admin pages, an emulator's control plane) is a 404 from tm-cache, so
 * that a read cache for the API is not a door to the rest of the host.
 *
 * Invariants: decided on the raw request target, before fastify or the upstream see it; a path
 * whose meaning depends on who resolves it (dot segments, encoded or back slashes, RFC 3986
 * §5.2.4) is refused, because the instance or a proxy in front of it may resolve
 * `/api/../admin` out of the prefix. Cached operations never come here: the pipeline answers
 * them first, and this check costs nothing on the hit path.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import { makeErrorBody } from '../../api/errors.js';
import { pathOf } from '../../ops/access-log.js';
import type { Handler } from '../pipeline.js';

/** `.` or `..` as a whole segment, plain or percent-encoded; or a slash that is not a plain `/`. */
const AMBIGUOUS_PATH = /(?:^|[/\\])(?:\.|%2e){1,2}(?:[/\\]|$)|\\|%2f|%5c/i;

/** May this request target be forwarded? Origin-form only (`/…`), under one of the prefixes. */
function isForwardedPath(url: string, prefixes: readonly string[]): boolean {
  const path = pathOf(url);
  return prefixes.some((prefix) => path.startsWith(prefix)) && !AMBIGUOUS_PATH.test(path);
}

/** `forward`, for the paths it may take; a JSON 404 naming the rule for every other. */
export function forwardOnly(prefixes: readonly string[], forward: Handler, logger: Logger): Handler {
  const rule =
    prefixes.length === 0 ? 'no path (upstream.forwardPrefixes is empty)' : `only paths starting with ${prefixes.join(', ')} (upstream.forwardPrefixes)`;
  const body = Buffer.from(JSON.stringify(makeErrorBody(`Not found: tm-cache forwards ${rule}.`)));
  return (req, res) => {
    if (isForwardedPath(req.url ?? '', prefixes)) return forward(req, res);
    notForwarded(req, res, body);
    if (logger.isLevelEnabled('debug')) logger.debug({ method: req.method, path: pathOf(req.url), status: 404 }, 'not forwarded');
  };
}

function notForwarded(req: IncomingMessage, res: ServerResponse, body: Buffer): void {
  res.removeHeader('cache-status');
  res.writeHead(404, { 'content-type': 'application/json; charset=utf-8', 'content-length': body.length });
  res.end(req.method === 'HEAD' ? undefined : body);
}
