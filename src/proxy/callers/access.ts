/**
 * Access rules: what an upstream answer to a caller's fill teaches about that caller, and what
 * it changes in the cache. Policy, kept apart from the fill mechanism (fill.ts) so each can be
 * tested against a fake below it.
 *
 * | answer                          | effect                                                       |
 * |---------------------------------|--------------------------------------------------------------|
 * | 200 to an admin-only operation (gate `admin`) | the caller is a verified site admin (`access.ttlMs`) |
 * | 401                             | the token's identity is forgotten, here and on every replica |
 * | 403 to an admin-only operation (gate `admin`) | the caller is no (longer an) admin            |
 * | 401, 403, 404 to a caller who may read the key | the entry is dropped from every tier: the instance now refuses what is held, so it is not served stale |
 * | 403, 404 to a project access confirmation | that user's entries of the project are dropped from every tier, on every replica |
 * | 401 to a project access confirmation | the token's identity is forgotten, here and on every replica |
 * | 401, 403, 404 to a fill or confirmation of a member's question about a project (`projectId`) | that user's confirmation and grants of the project are dropped, here and on every replica (access-grants.ts); the shared entry never is: one member's refusal must not evict a team's cache |
 *
 * A member's question about a project is one whose answer the project shares (`cache.sharing:
 * project`), whichever key it is answered from: the shared one (gate `member`), or the member's
 * own when it expands an area they hold no grant for (read-through.ts `#ownOrFill`, gate
 * `project`). The refusal is of the project's area either way, so it drops the same proof.
 */
import type { EntryGate } from '../decide.js';
import type { Caller } from './caller.js';

/** What the rules act on: the identity resolver and the cache. */
export interface AccessTargets {
  markAdmin(caller: Caller): void;
  clearAdmin(caller: Caller): void;
  forget(authorization: string): void;
  deleteEntry(key: string): void;
  /** Drops every entry of the project held for that user (its `<scope>|project:<id>` tag). */
  dropUserProject(caller: Caller, projectId: number): void;
  /** Drops the user's confirmation and grants of the project, on every replica (access-grants.ts). */
  refuseMember(caller: Caller, projectId: number): void;
}

/** The request an answer was for, as the rules need it. */
export interface AnsweredRequest {
  readonly key: string;
  readonly mayRead: boolean;
  /** What gates the entry (decide.ts): an `admin` answer's 200 or 403 says whether the caller is a site admin. */
  readonly gate: EntryGate;
  readonly caller: Caller;
  readonly authorization: string;
  /** A member's question about a project (decide.ts `projectId`, kept when answered from their own key): its project; 0 for any other request. */
  readonly projectId: number;
}

/** Answers that mean the caller may no longer see what is cached under the key. */
const REFUSALS = new Set([401, 403, 404]);

export class AccessRules {
  constructor(private readonly targets: AccessTargets) {}

  /** The fill's own answer (the leader's request): verification and dropping what is refused. */
  afterFill(r: AnsweredRequest, status: number): void {
    if (status === 200 && r.gate === 'admin') this.targets.markAdmin(r.caller);
    if (!REFUSALS.has(status)) return;
    if (r.projectId !== 0) this.targets.refuseMember(r.caller, r.projectId);
    // The shared entry stays; an entry of the caller's own (their own key included) goes.
    if (r.gate !== 'member' && r.mayRead) this.targets.deleteEntry(r.key);
  }

  /** Each caller served a refusal (leader or coalesced): what it says about that caller's credential. */
  afterRefusal(r: AnsweredRequest, status: number): void {
    if (status === 401) this.targets.forget(r.authorization);
    if (status === 403 && r.gate === 'admin') this.targets.clearAdmin(r.caller);
  }

  /** A project access confirmation (access-confirmation.ts) refused with `status`. */
  afterConfirmation(r: AnsweredRequest, projectId: number, status: number): void {
    if (status === 403 || status === 404) this.targets.dropUserProject(r.caller, projectId);
    if (r.projectId !== 0 && REFUSALS.has(status)) this.targets.refuseMember(r.caller, r.projectId);
    if (status === 401) this.targets.forget(r.authorization);
  }
}
