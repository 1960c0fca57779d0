/**
 * One request's allowance for waiting on a shared tier (Redis): it is spent by the first
 * command of that request that times out or fails on the connection, and from then on every
 * Redis role answers "nothing there" for the rest of the request without sending. So a slow
 * Redis costs a request at most one command timeout, however many lookups it would have made
 * (identity, admin verification, entry, fill lock, waiting for another replica's fill).
 *
 * Request-scoped and passed down explicitly (never a global): the pipeline's Decision carries
 * it as a plain field, so a memory hit allocates nothing for it.
 */
export interface SharedTierBudget {
  sharedTierSpent: boolean;
}

/** A fresh budget for work that has no Decision yet (resolving a caller). */
export function makeBudget(): SharedTierBudget {
  return { sharedTierSpent: false };
}
