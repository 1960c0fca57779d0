/**
 * Every request passed through to the instance spends the fleet's budget, as every fill does: the
 * instance counts a write, a cache-buster or an uncatalogued path against the account's limit
 * like any read, and one client sending them unbudgeted could push the account into a lockout
 * that pauses the whole fleet.
 *
 * - A request with a credential takes a token at its requester's turn (requester.ts): a caller
 *   this replica verified waits as that user (`client`, round-robin with fills); an unknown
 *   credential waits as its client address, behind every known caller (`unverified`), so a flood
 *   of junk tokens from one address is one turn, never the whole budget.
 * - A request without any credential is answered 401 here: every operation of the API answers
 *   401 without one (the spec's Authentication), so asking the instance would spend a token to
 *   learn nothing. A CORS preflight (`OPTIONS` with `Access-Control-Request-Method`) never
 *   carries credentials (Fetch §4.8): it is forwarded, as its client address, `unverified`.
 * - No token within `upstream.budget.maxWaitMs` (or the fleet paused for longer): tm-cache's own
 *   429, with a truthful Retry-After and a JSON body; the request never reaches the instance.
 *   A body the client sends meanwhile waits unread in the socket (node reads none until forwarded).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { makeErrorBody } from '../../api/errors.js';
import type { BudgetPriority } from '../../upstream/fleet-budget.js';
import type { LaneCaller } from '../../upstream/fair-queue.js';
import { toUpstreamError } from '../../upstream/client.js';
import type { Handler } from '../pipeline.js';
import { upstreamFailure } from '../respond/served.js';
import { requesterOf } from '../callers/requester.js';

/** The part of the fleet budget a passthrough request needs. */
export interface PassthroughBudget {
  acquire(priority: BudgetPriority, caller: LaneCaller): Promise<void> | undefined;
}

export interface BudgetedOptions {
  readonly budget: PassthroughBudget;
  /** The user this replica verified for a credential (identity memo), if any: no look-up, no I/O. */
  readonly verifiedUser: (authorization: string) => number | undefined;
}

const JSON_TYPE = 'application/json; charset=utf-8';

const UNAUTHENTICATED = Buffer.from(
  JSON.stringify(
    makeErrorBody('Unauthenticated.', {
      authorization: ['Required: every operation of the instance answers 401 without credentials; send Authorization: Bearer <token>.'],
    }),
  ),
);

/** `forward`, once the request holds a budget token; refused here without a credential or a token in time. */
export function budgeted(forward: Handler, o: BudgetedOptions): Handler {
  return (req, res) => {
    const requester = requesterOf(req, o.verifiedUser);
    if (requester === undefined) return answer(req, res, 401, UNAUTHENTICATED, { 'www-authenticate': 'Bearer' });
    const waiting = o.budget.acquire(requester.priority, requester.caller);
    if (waiting === undefined) return forward(req, res);
    // Anything but a token (the budget spent, or a throw forwarding) is answered here: never an unhandled rejection.
    waiting.then(() => (res.destroyed ? undefined : forward(req, res))).catch((err: unknown) => refuse(req, res, err));
  };
}

/** As a failed fill is answered (served.ts): the budget spent is tm-cache's 429 with how long until a token may be had. */
function refuse(req: IncomingMessage, res: ServerResponse, err: unknown): void {
  const { status, body, headers } = upstreamFailure(toUpstreamError(err));
  answer(req, res, status, Buffer.from(JSON.stringify(body)), headers);
}

function answer(req: IncomingMessage, res: ServerResponse, status: number, body: Buffer, headers: Readonly<Record<string, string>>): void {
  if (res.headersSent || res.destroyed) return;
  res.removeHeader('cache-status');
  res.writeHead(status, { ...headers, 'content-type': JSON_TYPE, 'content-length': body.length });
  res.end(req.method === 'HEAD' ? undefined : body);
}
