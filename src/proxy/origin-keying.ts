/**
 * Whether a browser's Origin is part of an answer's key, learned per operation from the
 * instance's own answers.
 *
 * Entries keep the instance's Access-Control-Allow-Origin (`cache.storedHeaders`). An instance
 * that reflects the Origin (`Access-Control-Allow-Origin: https://dash.example`) names one origin
 * in its answer, and says so with `Vary: Origin`: served to another origin, a browser refuses it.
 * An instance that answers `Access-Control-Allow-Origin: *`, or no CORS at all, gives every origin
 * the same answer, and keying on the Origin would only split the cache per browser origin.
 *
 * So, for requests that carry an Origin (browsers, cross-origin; an SDK or a same-origin page
 * sends none and never pays for any of this):
 * - until an operation's answers are known, each origin has its own entries (`|origin=<origin>`):
 *   what it was before anything was learned, and safe whatever the instance does;
 * - once an answer of the operation, asked with an Origin, said neither `Vary: Origin` (nor
 *   `Vary: *`) nor named an origin in Access-Control-Allow-Origin, the operation's answers for
 *   browsers are shared by every origin (`|origin=*`: apart from the entries of requests without
 *   an Origin, which an instance may answer without CORS headers);
 * - an answer that says `Vary: Origin`, `Vary: *` or names an origin puts the operation back to
 *   one entry per origin. One origin's Access-Control-Allow-Origin is never served to another.
 *
 * An instance whose CORS answer depends on the Origin says `Vary: Origin` (the Fetch standard,
 * "CORS protocol and HTTP caches"): an answer without it is taken at its word.
 */
import type { UpstreamResponse } from '../upstream/client.js';

/** The key segment of browser requests to an operation whose answers do not vary on the Origin. */
export const ANY_ORIGIN_SEGMENT = '|origin=*';

export class OriginKeying {
  /** Operations (catalogue ids) whose answers were seen not to vary on the Origin. */
  readonly #shared = new Set<string>();

  /** Whether an operation's answers are the same for every origin, as learned so far. */
  sharesOrigins(operation: string): boolean {
    return this.#shared.has(operation);
  }

  /** An answer of `operation` the instance gave to a request with an Origin (a storable one). */
  learn(operation: string, res: UpstreamResponse): void {
    const allowed = res.headers['access-control-allow-origin'];
    if (variesOnOrigin(res) || (allowed !== undefined && allowed !== '*')) this.#shared.delete(operation);
    else this.#shared.add(operation);
  }
}

/** Vary's members (RFC 9110 §12.5.5), lower case. */
function varyMembers(res: UpstreamResponse): string[] {
  const vary = res.headers['vary'];
  const text = Array.isArray(vary) ? vary.join(',') : vary;
  return text === undefined ? [] : text.split(',').map((member) => member.trim().toLowerCase());
}

/** The instance's answer depends on the Origin (`Vary: Origin` or `*`). */
export function variesOnOrigin(res: UpstreamResponse): boolean {
  return varyMembers(res).some((member) => member === 'origin' || member === '*');
}

/** `Vary: *`: the answer depends on more than the request says; a stored one never matches (RFC 9111 §4.1). */
export function variesOnAnything(res: UpstreamResponse): boolean {
  return varyMembers(res).includes('*');
}
