/**
 * What this process knows about credentials, each part bounded, so that junk credentials cannot grow it or starve members:
 *
 * - by header: the Authorization header as received → caller. The hit path's one lookup, with no
 *   hashing (see identity.ts). Every spelling of a token is its own entry, so this part is
 *   bounded in bytes (`identity.maxBytes`): the header's length is what an attacker controls.
 * - by credential: HMAC of the normalized credential → caller, at most `identity.maxEntries`
 *   (fixed-size keys). A new spelling of a known token finds its caller here: one token is one
 *   GET /user, however it is written.
 * - refused: HMAC → the instance's 401, until `identity.refusedTtlMs` has passed, bounded in
 *   bytes (`identity.refusedMaxBytes`): a repeated junk token is answered without asking upstream.
 *
 * Only HMACs key the last two; the clear credential is only ever a key of the first, in this heap.
 */
import { LRUCache } from 'lru-cache';
import type { UpstreamResponse } from '../../upstream/client.js';
import { BoundedMemo, type MemoStats } from '../bounded-memo.js';
import type { Caller } from './caller.js';

export interface IdentityMemoOptions {
  readonly maxEntries: number;
  readonly maxBytes: number;
  readonly refusedTtlMs: number;
  readonly refusedMaxBytes: number;
}

interface Refusal {
  readonly response: UpstreamResponse;
  readonly until: number;
}

/** The LRU's slots and the Map entry of one remembered header (the Caller itself is shared). */
const HEADER_ENTRY_OVERHEAD_BYTES = 256;
/** A refusal's slots, HMAC key, headers and objects besides its body. */
const REFUSAL_OVERHEAD_BYTES = 1024;
/** A refusal with a larger body is relayed but not remembered: 401 bodies are a few hundred bytes. */
const MAX_REFUSAL_BYTES = 64 * 1024;

/**
 * The form of an Authorization header that one credential always has: the scheme lowercased
 * (RFC 9110 §11.1: auth-scheme is case-insensitive) and whitespace runs collapsed to one space,
 * trimmed. The credential itself (a Bearer token68 has no whitespace) keeps its case.
 */
export function normalizeAuthorization(header: string): string {
  const text = header.trim().replace(/\s+/g, ' ');
  const space = text.indexOf(' ');
  return space < 0 ? text.toLowerCase() : text.slice(0, space).toLowerCase() + text.slice(space);
}

export class IdentityMemo {
  readonly #byHeader: BoundedMemo<Caller>;
  readonly #byCredential: LRUCache<string, Caller>;
  readonly #refused: BoundedMemo<Refusal>;

  reconfigure(refusedTtlMs: number): void {
    this.options = { ...this.options, refusedTtlMs };
  }

  constructor(private options: IdentityMemoOptions) {
    this.#byHeader = new BoundedMemo<Caller>(options.maxBytes, (_caller, header) => HEADER_ENTRY_OVERHEAD_BYTES + header.length);
    this.#byCredential = new LRUCache<string, Caller>({ max: options.maxEntries });
    this.#refused = new BoundedMemo<Refusal>(options.refusedMaxBytes, (r) => REFUSAL_OVERHEAD_BYTES + r.response.body.length, MAX_REFUSAL_BYTES);
  }

  /** The hit path: the caller remembered for this header as received. */
  get(header: string): Caller | undefined {
    return this.#byHeader.get(header);
  }

  set(header: string, caller: Caller): void {
    this.#byHeader.set(header, caller);
    this.#byCredential.set(caller.credentialId, caller);
  }

  /** Forgets the header's caller under every spelling known by credential (a 401: the token is dead). */
  delete(header: string): void {
    const caller = this.#byHeader.get(header);
    this.#byHeader.delete(header);
    if (caller !== undefined && this.#byCredential.get(caller.credentialId) === caller) this.#byCredential.delete(caller.credentialId);
  }

  /** A verified caller already known under another spelling of this credential, now remembered under this one too. */
  adopt(header: string, credentialId: string, now: number): Caller | undefined {
    const caller = this.#byCredential.get(credentialId);
    if (caller === undefined || now >= caller.verifiedUntil) return undefined;
    this.#byHeader.set(header, caller);
    return caller;
  }

  /** Forgets a credential under every spelling (another replica saw its 401). */
  deleteCredential(credentialId: string): void {
    this.#byCredential.delete(credentialId);
    this.#byHeader.deleteWhere((caller) => caller.credentialId === credentialId);
  }

  /** Forgets every caller (invalidation messages may have been lost); refusals stay, they only ever refuse. */
  clear(): void {
    this.#byHeader.clear();
    this.#byCredential.clear();
  }

  /** The instance's 401 for this credential, while it is remembered. */
  refusal(credentialId: string, now: number): UpstreamResponse | undefined {
    const refused = this.#refused.get(credentialId);
    return refused !== undefined && now < refused.until ? refused.response : undefined;
  }

  refuse(credentialId: string, response: UpstreamResponse, now: number): void {
    if (this.options.refusedTtlMs > 0) this.#refused.set(credentialId, { response, until: now + this.options.refusedTtlMs });
  }

  stats(): { readonly headers: MemoStats; readonly credentials: number; readonly refused: MemoStats } {
    return { headers: this.#byHeader.stats(), credentials: this.#byCredential.size, refused: this.#refused.stats() };
  }
}
