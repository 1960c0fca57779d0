/**
 * One request's allowance for waiting on a shared tier (Redis): it is spent by the first
 * command of that request that times out or fails on the connection, and from then on every
 * Redis role answers "nothing there" for the rest of the request without sending. So a slow
 * Redis costs a request at most one command timeout, however many lookups it would have made
 * (identity, admin verification, entry, fill lock, waiting for another replica's fill).
 *
 * Request-scoped and passed down explicitly (never a global): the proxy's per-request exchange
 * carries it as a plain field from the request's arrival, so a memory hit allocates nothing for it.
 */
export interface SharedTierBudget {
  sharedTierSpent: boolean;
}
