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
 * where the question would otherwise be filled from the instance; a hit never comes here. Sources
 * are found in memory's index, else (`answerShared`) among the pages other replicas recorded in
 * Redis under the question's name, read through the tiers and judged the same way.
 *
 * A derived answer is as old as its source (its Age, freshness and tags are the source's), it is
 * not stored (it goes with its source), and it is marked: `Cache-Status: tm-cache; hit; ...;
 * detail=derived`, the access log's `detail`, and `tm_cache_derived_total`.
 */
import { LRUCache } from 'lru-cache';
import { OPERATIONS, RESOURCES, type Operation, type OperationId, type ResourceName } from '../../api/catalogue.js';
import type { SharedTierBudget } from '../../cache/budget.js';
import { itemGroupOf, itemKey, listKey, type DerivationIndex, type IndexedPage } from '../../cache/derive/index.js';
import type { CanonicalRequest } from '../../api/normalize.js';
import { isFresh, type CacheEntry } from '../../cache/entry.js';
import type { CacheOutcome } from '../../cache/outcome.js';
import type { Decision } from '../decide.js';
import { judge, type Facts, type Occasion, type Verdict } from '../judge.js';
import type { Served } from '../respond/served.js';
import { etagOf } from '../storable.js';
import { coversExpands, coversRange, itemBody, pageBody } from './answers.js';

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
  /** The sources other replicas stored in Redis (redis/derive-sets.ts); absent: memory's alone. */
  readonly shared?: SharedSources | undefined;
}

/** Sources of derived answers another replica stored: found by name in Redis, read through the tiers. */
export interface SharedSources {
  /** The keys of up to `limit` pages recorded under `name` still fresh at `now`: one bounded command, a hint. */
  candidates(name: string, query: { readonly now: number; readonly limit: number }, budget: SharedTierBudget): Promise<readonly string[]>;
  /** The entry under `key`, read as any lookup reads it (memory, then Redis: checked against its key, decrypted, kept in memory). */
  read(key: string, now: number, budget: SharedTierBudget): Promise<CacheEntry | undefined>;
}

/** What finding a source of `d` takes: the name it is indexed under, memory's pages of it, and the body one of them makes. */
interface Plan {
  readonly name: string;
  readonly pages: () => IndexedPage[];
  /** Whether a page read from Redis is indexed under `name` (its key's scope and list, or an item it holds). */
  readonly names: (page: IndexedPage) => boolean;
  readonly bodyOf: (source: IndexedPage) => string | undefined;
}

/** Why a question is judged when a derived answer may answer it: looked up, or looked up again once its caller's access was confirmed. */
export type DerivableOccasion = Extract<Occasion, 'lookup' | 'access-confirmed'>;

/** What a question about to be filled does instead (`Deriver.miss`): a derived answer or the confirmation it waits for, a source's fill to wait for, or a look in Redis. */
export type MissStep = Derived | { readonly kind: 'wait'; readonly source: Promise<unknown> } | { readonly kind: 'ask-shared' };

const ASK_SHARED: MissStep = Object.freeze({ kind: 'ask-shared' });

/** The fill of a key running on this replica (fill.ts `running`), undefined when none is. */
export type Running = (key: string) => Promise<unknown> | undefined;

/** A list page being filled on this replica: its question, and the fill, settled once its answer is stored (or refused). */
interface Filling {
  readonly req: CanonicalRequest;
  readonly fill: Promise<unknown>;
}

/** Pages another replica stored read from Redis per question, freshest first: one is usually the source. */
const SHARED_SOURCES_READ = 3;

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
  /** List pages being filled, by `<scope>|<resource>` then key: what a question of one of its items, or another page of it, waits on. */
  readonly #filling = new Map<string, Map<string, Filling>>();

  constructor(private readonly o: DeriverOptions) {}

  /**
   * The derived answer to `d`; `confirm-access` when a source would answer it once the caller's
   * access to its project is confirmed (as a hit's would be: judge.ts); undefined when none is
   * certain from a fresh source this caller may be served (then the question is filled as
   * before). `facts`: what the judge reads; `occasion`: `access-confirmed` once it was.
   */
  answer(d: Decision, now: number, facts: Facts, occasion: DerivableOccasion = 'lookup'): Derived | undefined {
    const derived = this.#answer(d, now, facts, occasion);
    return derived === undefined ? undefined : this.#counted(d, derived);
  }

  /**
   * Whether `d` is derived now, from a fresh source this caller may be served without asking
   * anything: its entry's refresh (ahead of expiry, or while stale) need not ask the instance.
   * Counts nothing.
   */
  derivable(d: Decision, now: number, facts: Facts): boolean {
    return this.#answer(d, now, facts, 'lookup')?.kind === 'entry';
  }

  /**
   * As `answer`, from what other replicas stored in Redis: for a question the memory index cannot
   * answer, the pages recorded under its name (one command, under the request's Redis budget) are
   * read through the tiers, freshest first, and the first this caller would be served fresh
   * answers it, exactly as a page memory held would. A page gone, replaced, of another scope or not
   * holding what its name says is skipped: only the entry read is trusted.
   */
  async answerShared(d: Decision, now: number, facts: Facts, occasion: DerivableOccasion = 'lookup'): Promise<Derived | undefined> {
    const shared = this.o.shared;
    const plan = shared === undefined ? undefined : this.#plan(d);
    if (plan === undefined) return undefined;
    const keys = await shared!.candidates(plan.name, { now, limit: SHARED_SOURCES_READ }, d.request);
    let confirm: Derived | undefined;
    for (const key of keys) {
      const entry = await shared!.read(key, now, d.request);
      const page = entry === undefined ? undefined : this.o.index.pageOf(key, entry);
      if (page === undefined || !plan.names(page)) continue;
      const derived = this.#derive(d, [page], { now, facts, occasion }, plan.bodyOf);
      if (derived?.kind === 'entry') return this.#counted(d, derived);
      confirm ??= derived;
    }
    return confirm;
  }

  /**
   * What a question nothing fresh is held for, about to be filled, does instead, found from one
   * plan: its derived answer from memory (or the confirmation that waits for, as `answer`); else,
   * when it `mayWait`, the fill under way of a source that would answer it (`wait`:
   * `sourceInFlight`); else, with Redis, a look there (`ask-shared`: `answerShared`); undefined
   * when nothing may answer it but the instance.
   */
  // eslint-disable-next-line max-params -- the miss as the read-through judged it: its facts, its fills under way, and why it was judged
  miss(d: Decision, now: number, facts: Facts, running: Running, mayWait: boolean, occasion: DerivableOccasion = 'lookup'): MissStep | undefined {
    const plan = this.#plan(d);
    if (plan === undefined) return undefined;
    const derived = this.#fromMemory(d, plan, { now, facts, occasion });
    if (derived !== undefined) return this.#counted(d, derived);
    const source = mayWait ? this.#inFlight(d, plan, { now, facts }, running) : undefined;
    if (source !== undefined) return { kind: 'wait', source };
    return this.o.shared === undefined ? undefined : ASK_SHARED;
  }

  /**
   * A fill under way on this replica of a source that would answer `d` once fresh: a page memory
   * holds whose body answers the question and that this caller would be served but for its age
   * (judge.ts: fresh, or stale while revalidated), or a list page being filled (`filling`). A
   * question that would otherwise ask the instance, or refresh its own entry, waits on it
   * instead; undefined when none is. Counts nothing.
   */
  sourceInFlight(d: Decision, now: number, facts: Facts, running: Running): Promise<unknown> | undefined {
    const plan = this.#plan(d);
    return plan === undefined ? undefined : this.#inFlight(d, plan, { now, facts }, running);
  }

  #inFlight(d: Decision, plan: Plan, judged: { readonly now: number; readonly facts: Facts }, running: Running): Promise<unknown> | undefined {
    const { now, facts } = judged;
    for (const source of plan.pages()) {
      const pending = this.o.peek(source.key) === source.entry ? running(source.key) : undefined;
      if (pending === undefined) continue;
      const verdict = judge(d, { entry: source.entry, tier: 'memory' }, now, facts, 'lookup');
      if ((verdict.kind === 'fresh' || verdict.kind === 'stale-while-revalidate') && plan.bodyOf(source) !== undefined) return pending;
    }
    return this.#fillingSource(d);
  }

  /**
   * A fill of `d` (a list page) began on this replica (it leads it): until it settles, a question
   * of an item of its resource, or a page of the same list within its range, in the same scope,
   * waits for it rather than ask the instance (`sourceInFlight`). Nothing for other questions.
   */
  filling(d: Decision, fill: Promise<unknown>): void {
    if (d.canonical.op.envelope !== 'list' || !mayDerive(d)) return;
    const where = itemGroupOf(d.scope, d.canonical.op.resource);
    let fills = this.#filling.get(where);
    if (fills === undefined) this.#filling.set(where, (fills = new Map()));
    const filling: Filling = { req: d.canonical, fill };
    fills.set(d.key, filling);
    const done = (): void => {
      if (fills.get(d.key) !== filling) return;
      fills.delete(d.key);
      if (fills.size === 0 && this.#filling.get(where) === fills) this.#filling.delete(where);
    };
    fill.then(done, done);
  }

  /**
   * A list page being filled in `d`'s scope that may answer it: one of its resource's lists with
   * the expands asked for (for an item: a dashboard asks a list and its items together, and the
   * list most often holds them), or a page of the same list whose range spans the one asked for.
   * Judged again once it is stored: derived from it when it answers.
   */
  #fillingSource(d: Decision): Promise<unknown> | undefined {
    const want = d.canonical;
    const resource = ITEM_OF_LIST.get(want.op.id) ?? (want.op.envelope === 'list' ? want.op.resource : undefined);
    const fills = resource === undefined ? undefined : this.#filling.get(itemGroupOf(d.scope, resource));
    if (fills === undefined) return undefined;
    const list = want.op.envelope === 'list' ? listKey(d.scope, want) : undefined;
    for (const [key, filling] of fills) {
      if (key === d.key || !coversExpands(filling.req.expands, want.expands)) continue;
      if (list === undefined || (listKey(d.scope, filling.req) === list && coversRange(filling.req, want))) return filling.fill;
    }
    return undefined;
  }

  #counted(d: Decision, derived: Derived): Derived {
    if (derived.kind === 'entry') this.o.onDerived?.(d.canonical.op.id, d.canonical.op.envelope === 'list' ? 'page' : 'item');
    return derived;
  }

  #answer(d: Decision, now: number, facts: Facts, occasion: Occasion): Derived | undefined {
    const plan = this.#plan(d);
    return plan === undefined ? undefined : this.#fromMemory(d, plan, { now, facts, occasion });
  }

  /** The derived answer from the pages memory holds (or the confirmation one of them waits for). */
  #fromMemory(d: Decision, plan: Plan, judged: { readonly now: number; readonly facts: Facts; readonly occasion: Occasion }): Derived | undefined {
    // Newest first, and only while memory still holds the very entry indexed.
    const held = plan
      .pages()
      .filter((page) => this.o.peek(page.key) === page.entry)
      .sort((a, b) => b.entry.storedAt - a.entry.storedAt);
    return this.#derive(d, held, judged, plan.bodyOf);
  }

  #plan(d: Decision): Plan | undefined {
    if (!mayDerive(d)) return undefined;
    const op = d.canonical.op;
    if (op.envelope === 'list') this.o.index.asking(d.route.suffix, d.canonical);
    const resource = ITEM_OF_LIST.get(op.id);
    if (resource !== undefined) {
      const id = d.canonical.ids[RESOURCES[resource].idParam!]!;
      const name = itemKey(d.scope, resource, id);
      const group = itemGroupOf(d.scope, resource);
      return {
        name,
        pages: () => this.o.index.pagesHolding(d.scope, resource, id),
        names: (page) => page.itemGroup === group && page.ids.includes(id),
        bodyOf: (source) => {
          if (!coversExpands(source.req.expands, d.canonical.expands)) return undefined;
          const page = this.o.index.parsed(source.entry);
          const item = page?.result.find((x) => x['id'] === id);
          return item === undefined ? undefined : itemBody(resource, page!, item, d.canonical.expands);
        },
      };
    }
    if (op.envelope !== 'list') return undefined;
    const want = d.canonical;
    const name = listKey(d.scope, want);
    return {
      name,
      pages: () => this.o.index.pagesOf(d.scope, want),
      names: (page) => page.listKey === name,
      bodyOf: (source) => {
        const page = source.key === d.key ? undefined : this.o.index.parsed(source.entry);
        // A list whose total is 0 answers any expands (each empty); otherwise the source must hold them.
        if (page === undefined || (page.total > 0 && !coversExpands(source.req.expands, want.expands))) return undefined;
        return pageBody(want.op.resource, page, source.req, want);
      },
    };
  }

  /**
   * The first of the candidate pages (in the order given) that this caller would be served
   * fresh if it were held for the question itself (judge.ts, on the question's decision) and that
   * makes a body; else the confirmation one of them waits for, if any.
   */
  #derive(
    d: Decision,
    pages: readonly IndexedPage[],
    judged: { readonly now: number; readonly facts: Facts; readonly occasion: Occasion },
    bodyOf: (source: IndexedPage) => string | undefined,
  ): Derived | undefined {
    const { now, facts, occasion } = judged;
    let confirm: Derived | undefined;
    for (const source of pages) {
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

/** A question keyed on a browser's Origin (its key longer than scope and suffix) is never derived, nor a source: its answer may name that origin. */
function mayDerive(d: Decision): boolean {
  return d.mayRead && !d.noCache && d.key.length === d.scope.length + d.route.suffix.length;
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
