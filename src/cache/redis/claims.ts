/**
 * What an entry read back from a shared store may claim, bounded by the reader's configuration
 * (policy.ts `claimLimitsOf`). A writer decided its freshness, stale windows and tags; a reader
 * serves it for no longer than its own settings would have given the same answer, and drops it
 * on every invalidation its key names. An entry that claims to have been stored in the future
 * (beyond a clock skew between replicas) is refused: its bounds would start there.
 */
import type { StoredMeta } from '../entry.js';
import type { ClaimLimits } from '../policy.js';

/** Replicas' clocks may disagree by this much; an entry stored later than that is not believed. */
export const MAX_CLOCK_SKEW_MS = 60_000;

/** The metadata with its windows and tags bounded by `limits`, the same object when within them, or why it is refused. */
export function boundClaims(meta: StoredMeta, limits: ClaimLimits, now: number): StoredMeta | string {
  if (meta.storedAt > now + MAX_CLOCK_SKEW_MS) return 'stored in the future';
  const freshUntil = Math.min(meta.freshUntil, meta.storedAt + limits.maxTtlMs);
  const staleWhileRevalidateUntil = Math.min(meta.staleWhileRevalidateUntil, freshUntil + limits.maxStaleWhileRevalidateMs);
  const staleIfErrorUntil = Math.min(meta.staleIfErrorUntil, freshUntil + limits.staleIfErrorMs);
  const missingTags = limits.keyTags.filter((tag) => !meta.tags.includes(tag));
  const within =
    freshUntil === meta.freshUntil &&
    staleWhileRevalidateUntil === meta.staleWhileRevalidateUntil &&
    staleIfErrorUntil === meta.staleIfErrorUntil &&
    missingTags.length === 0;
  if (within) return meta;
  const tags = missingTags.length === 0 ? meta.tags : [...meta.tags, ...missingTags];
  return { ...meta, freshUntil, staleWhileRevalidateUntil, staleIfErrorUntil, tags };
}
