/**
 * Derived answers: a question nothing fresh is held for, answered from a fresh cached answer to a
 * broader one, when the result is certain (docs/how-it-works.md, "Derived answers"):
 *
 * - `item`: one run, milestone, session, automation source, project, role or group, from a list
 *   page that holds it, with the expands asked for or more (narrowed to what the item references);
 * - `page`: a page of a list from a cached page of the same list (the same filters, sort and
 *   order) of another size that covers its whole range, with the envelope the instance computes;
 *   and any page of a list whose total a cached page says is 0, or that lies past the last page.
 *
 * The source is looked up in the scope the question is decided in (decide.ts): the caller's own,
 * the verified admins', or the project's, and judged (judge.ts) as if it were held for the
 * question itself: it is served only when that verdict is `fresh`, so whatever refuses the
 * source to this caller (an unconfirmed access, a member without a grant for every area the
 * derived answer reveals, a client's no-cache, staleness) refuses the derived answer. It runs only
 * where the question would otherwise be filled from the instance; a hit never comes here.
 *
 * A derived answer is as old as its source (its Age, freshness and tags are the source's), it is
 * not stored (it goes with its source), and it is marked: `Cache-Status: tm-cache; hit; ...;
 * detail=derived`, the access log's `detail`, and `tm_cache_derived_total`.
 */
import { LRUCache } from 'lru-cache';
import { OPERATIONS, RESOURCES, type Operation, type OperationId, type ResourceName } from '../../api/catalogue.js';
import type { DerivationIndex, IndexedPage } from '../../cache/derive/index.js';
import { isFresh, type CacheEntry } from '../../cache/entry.js';
import type { CacheOutcome } from '../../cache/outcome.js';
import type { Decision } from '../decide.js';
import { judge, type Facts, type Occasion, type Verdict } from '../judge.js';
import type { Served } from '../respond/served.js';
import { etagOf } from '../storable.js';
import { coversExpands, itemBody, pageBody } from './answers.js';

/** A derived answer, or the confirmation of the caller's access to its source's project it waits for. */
export type Derived = Served | Extract<Verdict, { kind: 'confirm-access' }>;

/** What a derived answer was made by: one resource from a list page, or a page from another page. */
export type DerivationRule = 'item' | 'page';

export interface DeriverOptions {
  readonly index: DerivationIndex;
  /** What memory holds for a key, not counted as a use. */
  readonly peek: (key: string) => CacheEntry | undefined;
  /** A derived answer was served (the metric). */
  readonly onDerived?: ((operation: OperationId, rule: DerivationRule) => void) | undefined;
}

/** `Cache-Status: tm-cache; hit; ttl=…; detail=derived`. */
const DERIVED: CacheOutcome = Object.freeze({ kind: 'hit', tier: 'memory', detail: 'derived' });

/** Derived entries kept for the next reader of the same question from the same source (its ETag and gzip variant made once). */
const DERIVED_KEPT = 1_024;

/**
 * The single operations answered from their resource's list: every single operation whose item is
 * the list's item. Not `getUser`: the spec leaves open whether its answer is wrapped in `result`
 * like the others, so its shape is not certain to be the list item's.
 */
const ITEM_OF_LIST: ReadonlyMap<OperationId, ResourceName> = new Map(
  OPERATIONS.filter((op) => op.envelope === 'single' && op.id !== 'getUser' && hasList(op)).map((op) => [op.id, op.resource]),
);

function hasList(op: Operation): boolean {
  return OPERATIONS.some((list) => list.envelope === 'list' && list.resource === op.resource);
}

export class Deriver {
  readonly #derived = new LRUCache<string, { readonly source: CacheEntry; readonly entry: CacheEntry }>({ max: DERIVED_KEPT });

  constructor(private readonly o: DeriverOptions) {}

  /**
   * The derived answer to `d`; `confirm-access` when a source would answer it once the caller's
   * access to its project is confirmed (as a hit's would be: judge.ts); undefined when none is
   * certain from a fresh source this caller may be served (then the question is filled as
   * before). `facts`: what the judge reads; `occasion`: `access-confirmed` once it was.
   */
  answer(d: Decision, now: number, facts: Facts, occasion: Extract<Occasion, 'lookup' | 'access-confirmed'> = 'lookup'): Derived | undefined {
    const derived = this.#answer(d, now, facts, occasion);
    if (derived?.kind === 'entry') this.o.onDerived?.(d.canonical.op.id, d.canonical.op.envelope === 'list' ? 'page' : 'item');
    return derived;
  }

  /**
   * Whether `d` is derived now, from a fresh source this caller may be served without asking
   * anything: its entry's refresh (ahead of expiry, or while stale) need not ask the instance.
   * Counts nothing.
   */
  derivable(d: Decision, now: number, facts: Facts): boolean {
    return this.#answer(d, now, facts, 'lookup')?.kind === 'entry';
  }

  #answer(d: Decision, now: number, facts: Facts, occasion: Occasion): Derived | undefined {
    // A question keyed on a browser's Origin (its key longer than scope and suffix) is never derived: its answer may name that origin.
    if (!d.mayRead || d.noCache || d.key.length !== d.scope.length + d.route.suffix.length) return undefined;
    const op = d.canonical.op;
    if (op.envelope === 'list') this.o.index.asking(d.route.suffix, d.canonical);
    const resource = ITEM_OF_LIST.get(op.id);
    if (resource !== undefined) {
      const id = d.canonical.ids[RESOURCES[resource].idParam!]!;
      return this.#derive(d, this.o.index.pagesHolding(d.scope, resource, id), { now, facts, occasion }, (source) => {
        if (!coversExpands(source.req.expands, d.canonical.expands)) return undefined;
        const page = this.o.index.parsed(source.entry);
        const item = page?.result.find((x) => x['id'] === id);
        return item === undefined ? undefined : itemBody(resource, page!, item, d.canonical.expands);
      });
    }
    if (op.envelope !== 'list') return undefined;
    const want = d.canonical;
    return this.#derive(d, this.o.index.pagesOf(d.scope, want), { now, facts, occasion }, (source) => {
      const page = source.key === d.key ? undefined : this.o.index.parsed(source.entry);
      // A list whose total is 0 answers any expands (each empty); otherwise the source must hold them.
      if (page === undefined || (page.total > 0 && !coversExpands(source.req.expands, want.expands))) return undefined;
      return pageBody(want.op.resource, page, source.req, want);
    });
  }

  /**
   * The first of the candidate pages memory still holds, newest first, that this caller would be
   * served fresh if it were held for the question itself (judge.ts, on the question's decision)
   * and that makes a body; else the confirmation one of them waits for, if any.
   */
  #derive(
    d: Decision,
    pages: readonly IndexedPage[],
    judged: { readonly now: number; readonly facts: Facts; readonly occasion: Occasion },
    bodyOf: (source: IndexedPage) => string | undefined,
  ): Derived | undefined {
    const { now, facts, occasion } = judged;
    let confirm: Derived | undefined;
    const held = pages.filter((page) => this.o.peek(page.key) === page.entry).sort((a, b) => b.entry.storedAt - a.entry.storedAt);
    for (const source of held) {
      const verdict = judge(d, { entry: source.entry, tier: 'memory' }, now, facts, occasion);
      // A confirmation is worth asking for only for a source that is fresh (judge.ts checks access before freshness).
      if (verdict.kind !== 'fresh' && (verdict.kind !== 'confirm-access' || confirm !== undefined || !isFresh(source.entry, now))) continue;
      const body = bodyOf(source);
      if (body === undefined) continue;
      if (verdict.kind === 'fresh') return this.#serve(d, source.entry, body);
      confirm = verdict;
    }
    return confirm;
  }

  #serve(d: Decision, source: CacheEntry, body: string): Served {
    const kept = this.#derived.get(d.key);
    let entry = kept?.source === source ? kept.entry : undefined;
    if (entry === undefined) {
      entry = derivedEntry(source, Buffer.from(body));
      this.#derived.set(d.key, { source, entry });
    }
    return { kind: 'entry', entry, outcome: DERIVED };
  }
}

/** The derived answer as an entry: the source's headers, times and tags, its own body and ETag (made as storable.ts makes one). */
function derivedEntry(source: CacheEntry, body: Buffer): CacheEntry {
  const etag = etagOf(body);
  return {
    status: 200,
    headers: { ...source.headers, etag },
    body,
    etag,
    storedAt: source.storedAt,
    freshUntil: source.freshUntil,
    staleWhileRevalidateUntil: source.staleWhileRevalidateUntil,
    staleIfErrorUntil: source.staleIfErrorUntil,
    tags: source.tags,
  };
}
