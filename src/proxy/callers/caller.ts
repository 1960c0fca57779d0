import type { Scope } from '../../cache/key.js';

/** A caller the instance verified: who it is, in which scope its own answers live, and until when that holds. */
export interface Caller {
  readonly userId: number;
  readonly scope: Scope;
  /** HMAC of the credential: the only form of it that may be logged, shared or stored. */
  readonly credentialId: string;
  /**
   * The identity is trusted until then; past it, it is only good to serve stale entries while
   * upstream fails. Renewed by any 200 the instance gives the credential (identity.ts `renew`).
   */
  verifiedUntil: number;
  /** Verified site admin until then (0: not verified). */
  adminUntil: number;
}
