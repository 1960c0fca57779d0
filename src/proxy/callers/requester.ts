/**
 * Whose turn a request takes in the fleet's budget and the upstream lanes when it is not (yet) a
 * verified caller's: a passthrough request, or the first look-up of a credential never seen.
 *
 * - A credential this replica verified (its identity memo names the user): that user, `client`.
 * - Any other credential: its client address, `unverified`, behind every known caller. Keyed by
 *   address, not by credential: random tokens are free to make, so a credential's own turn would
 *   give a flood as many turns as tokens; an address is one turn, however many tokens it sends.
 *   (Behind a load balancer every client shares its address: unknown credentials then share one
 *   turn, which still never delays a known caller.)
 * - No credential: undefined under the instance's API (`/api/`, whose every operation answers 401
 *   without one), unless a CORS preflight (which never carries one); elsewhere (a prefix an
 *   operator chose to forward) its address, `unverified`.
 */
import type { IncomingMessage } from 'node:http';
import type { BudgetPriority } from '../../upstream/fleet-budget.js';
import type { LaneCaller } from '../../upstream/fair-queue.js';

export interface Requester {
  readonly caller: LaneCaller;
  readonly priority: BudgetPriority;
}

/** The turn of a request from `address` (a socket's remote address) whose credential is not verified here. */
export function unverifiedRequester(address: string | undefined): Requester {
  return { caller: `addr:${address ?? 'unknown'}`, priority: 'unverified' };
}

/** `req`'s requester; undefined: no credential, and not a preflight (nothing the instance could answer but 401). */
export function requesterOf(req: IncomingMessage, verifiedUser: (authorization: string) => number | undefined): Requester | undefined {
  const authorization = req.headers.authorization;
  if (authorization === undefined || authorization === '') {
    return isPreflight(req) || !isApiPath(req.url) ? unverifiedRequester(req.socket.remoteAddress) : undefined;
  }
  const userId = verifiedUser(authorization);
  return userId === undefined ? unverifiedRequester(req.socket.remoteAddress) : { caller: userId, priority: 'client' };
}

/** The instance's API: every operation it lists answers 401 without a credential (spec, Authentication). */
const API_ROOT = '/api/';

function isApiPath(url: string | undefined): boolean {
  return url !== undefined && url.startsWith(API_ROOT);
}

/** A CORS preflight (Fetch §3.2.2): OPTIONS with Access-Control-Request-Method. */
function isPreflight(req: IncomingMessage): boolean {
  return req.method === 'OPTIONS' && req.headers['access-control-request-method'] !== undefined;
}
