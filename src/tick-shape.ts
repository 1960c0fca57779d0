/**
 * One tick object kept for the life of the process, so that V8 keeps the shape of them all.
 * Called by cli.ts before any command runs, so before the proxy (or the emulator) is loaded.
 *
 * Node's streams and HTTP server call `process.nextTick` about ten times per request, and each
 * call builds a tick object from a literal with computed (symbol) keys. V8 builds that literal
 * with inline stores only while its feedback names one map for it. Feedback holds maps weakly:
 * when a full GC finds no tick object alive (an idle replica's GCs, some during start-up), the
 * tick object's maps are collected, the next tick object is built through new ones, and the
 * feedback, seeing another map, turns megamorphic for the rest of the process. From then on every
 * tick object is built in V8's runtime, property by property.
 *
 * Measured with `perf record` on replicas taking memory hits of the 87 KB page (identity
 * clients): in that state about 8 % of a hit's CPU was that runtime path, and a hit cost 10–40 %
 * more CPU than in a replica without it (`npm run bench -- hit`: the control, a second
 * identical process, differed from the first by up to 1.4×). Without this, 12 of 12 replicas
 * were in that state at their first load, and 2 of 2 loaded again after 80 s idle; with one tick
 * object kept, 0 of 10, at their first load and again after 80 s idle. Settling the feedback
 * with a burst of nextTick calls at start-up is not enough: an idle GC collects the maps later.
 *
 * The object is caught by an async hook enabled for that one call only: no hook stays enabled,
 * and what is kept is one small object (its callback does nothing).
 */
import { createHook } from 'node:async_hooks';

/** The tick object kept: its map, and the maps it was built through, stay alive with it. */
let kept: object | undefined;

function nothing(): void {}

/** Keeps one tick object alive from now on (once per process; later calls do nothing). */
export function keepTickObjectShape(): void {
  if (kept !== undefined) return;
  const hook = createHook({
    init(_asyncId, type, _triggerAsyncId, resource) {
      if (type === 'TickObject') kept ??= resource;
    },
  });
  hook.enable();
  process.nextTick(nothing);
  hook.disable();
}

/** Whether a tick object is kept (tests). */
export function keepsTickObject(): boolean {
  return kept !== undefined;
}
