/**
 * The index of derived answers: which cached list pages hold a resource, and which pages of one
 * list (the same filters, sort and order) are cached, so that finding the source of a derived
 * answer (src/proxy/derive/) is a lookup by what the question names, never a scan of the cache.
 *
 * It watches the memory tier (`MemoryObserver`): every list entry stored is indexed, every entry
 * that leaves (evicted, expired, deleted, invalidated, replaced) is unindexed, in step with the
 * LRU. A list stored is indexed just after the tick that stored it (`setImmediate`), or at the
 * first lookup before that, so that reading its body (a scan of its items' ids, scan.ts: one per
 * list entry stored, never on a memory hit) does not delay the answer that brought it, and a
 * lookup always sees every list memory holds. A page is parsed only when an answer is derived
 * from it, and kept parsed in a small memo, since the questions it answers tend to follow it.
 * What it indexes is what this replica's memory holds; across replicas, the Redis tier records each list page it writes under the names given here
 * (`sharedNames`, redis/derive-sets.ts), and a replica reads such a page as a source
 * (`pageOf`, derive/deriver.ts `answerShared`), then holds it in memory and indexes it here.
 *
 * A list's question is the one seen on its way to the instance (`asking`), else read back from its
 * key. A key whose query is too long to keep inline is hashed (key.ts): one this replica never
 * asked (another replica's, read from Redis) is not indexed. Not indexed either: a key naming a
 * browser's Origin, and a body that is not the list envelope.
 */
import { LRUCache } from 'lru-cache';
import { OPERATIONS, RESOURCES, type Operation, type ResourceName } from '../../api/catalogue.js';
import { normalizeRequest, type CanonicalRequest } from '../../api/normalize.js';
import { readBody, type CacheEntry } from '../entry.js';
import { KEY_VERSION } from '../key.js';
import type { MemoryObserver } from '../memory-tier.js';
import { scanPage, type ScannedPage } from './scan.js';

/** One page of a list as the instance answered it (spec, List envelope). */
export interface ParsedPage {
  readonly page: number | null;
  readonly perPage: number;
  readonly total: number;
  readonly result: readonly Readonly<Record<string, unknown>>[];
  readonly expands: Readonly<Record<string, readonly unknown[]>>;
}

/** A list entry in memory, as the index knows it. */
export interface IndexedPage {
  readonly key: string;
  /** The entry indexed: a source is served only while memory still holds this very one. */
  readonly entry: CacheEntry;
  /** Its question: as asked on its way to the instance, else read back from its key. */
  readonly req: CanonicalRequest;
  /** The ids of the resources it holds (none for a list of resources no path names by id), indexed under `itemGroup`. */
  readonly ids: readonly number[];
  /** `<scope>|<resource>`: where its items are indexed. */
  readonly itemGroup: string;
  readonly listKey: string;
}

/** List questions remembered until their entry is stored (a fill takes seconds at most, the entries many). */
const QUESTIONS_KEPT = 4_096;

/** Parsed pages kept for the derivations that follow them: a few, as a page of 100 runs parses into some hundred KB. */
const PARSED_PAGES_KEPT = 64;

const LIST_OPERATIONS: ReadonlyMap<string, Operation> = new Map(OPERATIONS.filter((op) => op.envelope === 'list').map((op) => [op.id, op]));

/** The parameters a list's pages differ by (and the expands, which a source may have more of). */
const PAGING_PARAMS = new Set(['page', 'per_page', 'expands']);

export class DerivationIndex implements MemoryObserver {
  readonly #byKey = new Map<string, IndexedPage>();
  /**
   * `<scope>|<resource>` → id → keys of the pages that hold that resource: a page's 100 items are
   * 100 look-ups by number in one map, no string made per item.
   */
  readonly #byItem = new Map<string, Map<number, Keys>>();
  /** `<scope>|<operation>|<path ids>|<query without paging and expands>` → keys of that list's pages. */
  readonly #byList = new Map<string, Keys>();
  readonly #parsed = new LRUCache<CacheEntry, ParsedPage>({ max: PARSED_PAGES_KEPT });
  /** List entries stored in this tick, indexed in the next (dropped meanwhile: never indexed). */
  readonly #pending = new Map<string, CacheEntry>();
  #scheduled = false;
  #learn: ((tag: string, projectId: number) => void) | undefined;

  /**
   * Told the project of every item of a page indexed (`run:7` → 4): a write to an item then drops
   * its project's entries (policy.ts `tagsForWrite`), the pages it derives from included, as a
   * write to a resource whose single answer was filled does.
   */
  teach(learn: (tag: string, projectId: number) => void): void {
    this.#learn = learn;
  }
  /** List questions by key suffix, as seen on their way to a fill: the only way back from a hashed query (key.ts), and no parse of a key's query for the others. */
  readonly #asked = new LRUCache<string, CanonicalRequest>({ max: QUESTIONS_KEPT });

  /**
   * A list question on its way to the instance (derive/deriver.ts sees every one): kept, so that
   * its entry, once stored, is indexed by what it asked without reading its key's query again.
   */
  asking(suffix: string, req: CanonicalRequest): void {
    this.#asked.set(suffix, req);
  }

  stored(key: string, entry: CacheEntry): void {
    const known = this.#byKey.get(key);
    if (known !== undefined) {
      // The same answer again (its gzip variant swapped in): kept, pointing at the entry memory holds.
      if (known.entry.etag === entry.etag) return void this.#byKey.set(key, { ...known, entry });
      this.#unindex(known);
    }
    if (!LIST_OPERATIONS.has(key.split('|', 3)[2] ?? '')) return;
    // Indexed after this tick: a fill's answer (or a Redis hit) is written first, the parse comes after.
    this.#pending.set(key, entry);
    if (!this.#scheduled) {
      this.#scheduled = true;
      setImmediate(() => this.#indexPending());
    }
  }

  dropped(key: string, entry: CacheEntry, reason: LRUCache.DisposeReason): void {
    // A replacement (`set` on a held key) is told to `stored` next, which compares the two.
    if (reason === 'set') return;
    if (this.#pending.get(key) === entry) this.#pending.delete(key);
    const known = this.#byKey.get(key);
    if (known !== undefined && known.entry === entry) this.#unindex(known);
  }

  #indexPending(): void {
    this.#scheduled = false;
    for (const [key, entry] of this.#pending) this.#index(key, entry);
    this.#pending.clear();
  }

  #index(key: string, entry: CacheEntry): void {
    const read = this.#read(key, entry);
    if (read === undefined) return;
    const { indexed, items } = read;
    const resource = indexed.req.op.resource;
    const ids = indexed.ids;
    if (this.#learn !== undefined) {
      for (let i = 0; i < ids.length; i++) {
        const project = items.projects[i];
        if (project !== undefined) this.#learn(`${resource}:${ids[i]}`, project);
      }
    }
    this.#byKey.set(key, indexed);
    if (ids.length > 0) {
      let group = this.#byItem.get(indexed.itemGroup);
      if (group === undefined) this.#byItem.set(indexed.itemGroup, (group = new Map()));
      for (const id of ids) add(group, id, key);
    }
    add(this.#byList, indexed.listKey, key);
  }

  /**
   * A list entry as the index knows it (its question, the resources it holds, its list), whether
   * memory holds it or not (a source read from Redis: derive/deriver.ts); undefined for anything
   * else, and for a hashed key whose question this replica never asked.
   */
  pageOf(key: string, entry: CacheEntry): IndexedPage | undefined {
    return this.#read(key, entry)?.indexed;
  }

  /**
   * A list entry indexed, and its items' ids and projects: scanned, not parsed (scan.ts: most
   * pages stored are never derived from), unless the page is parsed already.
   */
  #read(key: string, entry: CacheEntry): { indexed: IndexedPage; items: ScannedPage } | undefined {
    const question = questionOf(key, (suffix) => this.#asked.get(suffix));
    if (question === undefined) return undefined;
    const items = itemsOf(this.#parsed.get(entry)) ?? scanBody(entry);
    if (items === undefined) return undefined;
    const { scope, req } = question;
    const resource = req.op.resource;
    const ids = RESOURCES[resource].idParam === null ? [] : items.ids;
    return { indexed: { key, entry, req, ids, itemGroup: itemGroupOf(scope, resource), listKey: listKey(scope, req) }, items };
  }

  /**
   * What a list entry written to Redis can answer, for the other replicas (redis/derive-sets.ts):
   * each resource it holds and its list, named as this index names them; undefined for anything
   * else. The page parsed for memory's index is reused (the entry written is the same answer,
   * with its gzip variant).
   */
  sharedNames(key: string, entry: CacheEntry): readonly string[] | undefined {
    if (!LIST_OPERATIONS.has(key.split('|', 3)[2] ?? '')) return undefined;
    const known = this.#byKey.get(key);
    const pending = this.#pending.get(key);
    const same = known?.entry.etag === entry.etag ? known : this.pageOf(key, pending?.etag === entry.etag ? pending : entry);
    if (same === undefined) return undefined;
    const names = same.ids.map((id) => itemName(same.itemGroup, id));
    names.push(same.listKey);
    return names;
  }

  /** The pages of `scope` that hold the resource `resource:id`. */
  pagesHolding(scope: string, resource: ResourceName, id: number): IndexedPage[] {
    if (this.#pending.size > 0) this.#indexPending();
    return this.#pages(this.#byItem.get(itemGroupOf(scope, resource))?.get(id));
  }

  /** The pages of `scope` of the list `req` asks for: the same operation, path ids, filters, sort and order. */
  pagesOf(scope: string, req: CanonicalRequest): IndexedPage[] {
    if (this.#pending.size > 0) this.#indexPending();
    return this.#pages(this.#byList.get(listKey(scope, req)));
  }

  /** The page an entry holds, parsed (kept for the next few derivations); undefined when it is not the list envelope. */
  parsed(entry: CacheEntry): ParsedPage | undefined {
    let page = this.#parsed.get(entry);
    if (page === undefined) {
      page = parsePage(entry);
      if (page !== undefined) this.#parsed.set(entry, page);
    }
    return page;
  }

  /** How many pages are indexed (tests, the status of the index). */
  get size(): number {
    return this.#byKey.size;
  }

  #pages(keys: Keys | undefined): IndexedPage[] {
    if (keys === undefined) return [];
    if (typeof keys === 'string') return [this.#byKey.get(keys)!];
    const pages: IndexedPage[] = [];
    for (const key of keys) pages.push(this.#byKey.get(key)!);
    return pages;
  }

  #unindex(indexed: IndexedPage): void {
    this.#byKey.delete(indexed.key);
    if (indexed.ids.length > 0) {
      const group = this.#byItem.get(indexed.itemGroup)!;
      for (const id of indexed.ids) remove(group, id, indexed.key);
      if (group.size === 0) this.#byItem.delete(indexed.itemGroup);
    }
    remove(this.#byList, indexed.listKey, indexed.key);
  }
}

/** A list entry's key read back: its scope and canonical question; undefined for anything else. */
function questionOf(key: string, asked: (suffix: string) => CanonicalRequest | undefined): { scope: string; req: CanonicalRequest } | undefined {
  // `<scope>|<version>|<operation>|<path ids>|<query>` (key.ts); a sixth part names an Origin.
  const parts = key.split('|');
  if (parts.length !== 5 || parts[1] !== KEY_VERSION) return undefined;
  const [scope, , operationId, idList, query] = parts as [string, string, string, string, string];
  const op = LIST_OPERATIONS.get(operationId);
  if (op === undefined) return undefined;
  const seen = asked(key.slice(scope.length));
  if (seen !== undefined) return { scope, req: seen };
  if (query.startsWith('#')) return undefined;
  const values = idList === '' ? [] : idList.split(',').map(Number);
  if (values.length !== op.pathIds.length) return undefined;
  const ids: Record<string, number> = {};
  op.pathIds.forEach((name, i) => (ids[name] = values[i]!));
  try {
    return { scope, req: normalizeRequest(op, ids, query) };
  } catch {
    return undefined;
  }
}

/** The name of one resource of a scope, as the pages holding it are named in Redis (`sharedNames`; derive/deriver.ts reads them). */
export function itemKey(scope: string, resource: ResourceName, id: number): string {
  return itemName(itemGroupOf(scope, resource), id);
}

/** The resources of one kind in a scope (`u:7|run`): where this index keeps their pages by id. */
export function itemGroupOf(scope: string, resource: ResourceName): string {
  return `${scope}|${resource}`;
}

const itemName = (group: string, id: number): string => `${group}:${id}`;

/** The name of a list of a scope (its operation, path ids, filters, sort and order), as its pages are indexed. */
export function listKey(scope: string, req: CanonicalRequest): string {
  const query =
    req.query === ''
      ? ''
      : req.query
          .split('&')
          .filter((part) => !PAGING_PARAMS.has(part.slice(0, part.indexOf('='))))
          .join('&');
  return `${scope}|${req.op.id}|${req.op.pathIds.map((name) => req.ids[name]).join(',')}|${query}`;
}

/** The ids and projects of a page already parsed. */
function itemsOf(page: ParsedPage | undefined): ScannedPage | undefined {
  if (page === undefined) return undefined;
  return {
    ids: page.result.map((item) => item['id'] as number),
    projects: page.result.map((item) => (Number.isSafeInteger(item['project_id']) ? (item['project_id'] as number) : undefined)),
  };
}

function scanBody(entry: CacheEntry): ScannedPage | undefined {
  const body = readBody(entry);
  return body === undefined ? undefined : scanPage(body);
}

function parsePage(entry: CacheEntry): ParsedPage | undefined {
  const body = readBody(entry);
  if (body === undefined) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch {
    return undefined;
  }
  if (parsed === null || typeof parsed !== 'object') return undefined;
  const { page, per_page: perPage, total, result, expands } = parsed as Record<string, unknown>;
  if (!(page === null || Number.isSafeInteger(page)) || !Number.isSafeInteger(perPage) || !Number.isSafeInteger(total)) return undefined;
  if (!Array.isArray(result) || !result.every((item) => item !== null && typeof item === 'object' && Number.isSafeInteger((item as { id?: unknown }).id))) {
    return undefined;
  }
  if (expands === null || typeof expands !== 'object' || Array.isArray(expands)) return undefined;
  if (!Object.values(expands).every((objects) => Array.isArray(objects))) return undefined;
  return {
    page: page as number | null,
    perPage: perPage as number,
    total: total as number,
    result: result as Record<string, unknown>[],
    expands: expands as Record<string, unknown[]>,
  };
}

/**
 * Keys by name: one key as itself (a resource is held by one page, most often), a set from the
 * second on, so that indexing a page of 100 items makes no set per item.
 */
type Keys = string | Set<string>;

function add<K>(map: Map<K, Keys>, k: K, key: string): void {
  const keys = map.get(k);
  if (keys === undefined || keys === key) return void map.set(k, key);
  if (typeof keys === 'string') map.set(k, new Set([keys, key]));
  else keys.add(key);
}

function remove<K>(map: Map<K, Keys>, k: K, key: string): void {
  const keys = map.get(k);
  if (keys === undefined) return;
  if (typeof keys === 'string') {
    if (keys === key) map.delete(k);
    return;
  }
  keys.delete(key);
  if (keys.size === 1) map.set(k, keys.values().next().value!);
}
