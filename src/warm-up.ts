/**
 * `process.nextTick`, settled before anything else runs: called first by the commands that serve
 * (cli.ts), before they load the proxy.
 *
 * Node's streams and HTTP server call `process.nextTick` several times per request, and each call
 * builds a tick object from a literal with computed (symbol) keys. Once V8's feedback for those
 * keys is polymorphic, every tick object is built in the runtime, property by property
 * (`Runtime_DefineKeyedOwnPropertyInLiteral` and its map transitions). Loading and starting
 * tm-cache left it that way in every process measured (6 of 6 under `perf`; a bare node:http
 * server with a few of the same libraries loaded, about half): about 8 % of a memory hit's CPU
 * went to that runtime path, and a hit cost about 10 % more CPU than in a process without it.
 *
 * A burst of nextTick calls here, while nothing else runs, avoided it in every process measured
 * (12 of 12, through `tm-cache serve` and through `node --import`). Smaller warm-ups did not:
 * 300 or 900 calls left 4 of 4 processes as before; 6,000 calls in batches of 100, 1 of 3. What
 * exactly V8 keeps from the burst was not traced; the measurement is `npm run bench -- hit`
 * (two identical processes, one the control of the other) and `perf record` of a loaded process.
 * It costs about a millisecond at start-up; the ticks run, and do nothing, once this returns.
 */

/** Calls to `process.nextTick` in the start-up burst (see above for what fewer did). */
const WARM_UP_TICKS = 6_000;

function nothing(): void {}

export function warmUpNextTick(): void {
  for (let i = 0; i < WARM_UP_TICKS; i++) process.nextTick(nothing);
}
