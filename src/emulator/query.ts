/**
 * The list pipeline shared by every list operation: narrow by created_at through the presorted
 * candidates, filter, sort, paginate, and write the list envelope.
 *
 * Choices where the spec is silent (docs/emulator.md, "API notes: where the spec is silent"):
 * - `*_after` is inclusive and `*_before` exclusive: consecutive windows never overlap;
 *   an item whose timestamp is null matches neither.
 * - Several values of one filter match any of them; different filters must all match.
 * - Ties are broken by id, in the same direction as the order; nulls sort lowest (first in
 *   `asc`, last in `desc`).
 * - Lists without `sort` (users, roles, groups, project users) are in id order.
 * - A page beyond the last answers an empty `result` with that `page`, `prev_page` = page - 1,
 *   `next_page` null, and the real `last_page`, as most paginators do.
 */
import type { CanonicalRequest, FilterValue } from '../api/normalize.js';
import { makeExpands } from './expands.js';
import type { Kind, World } from './kinds.js';

type Predicate<T> = (item: T) => boolean;

/** [lo, hi) of the candidates with created_at in [after, before). */
function createdRange<T>(world: World, kind: Kind<T>, items: readonly T[], after?: number, before?: number): [number, number] {
  const lowerBound = (t: number) => {
    let lo = 0,
      hi = items.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (kind.createdAt(items[mid]!, world) < t) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
  return [after === undefined ? 0 : lowerBound(after), before === undefined ? items.length : lowerBound(before)];
}

function compileFilter<T>(world: World, kind: Kind<T>, name: string, value: FilterValue): Predicate<T> {
  const get = (item: T, field: string) => kind.field(item, field, world);
  if (name.endsWith('_after') || name.endsWith('_before')) {
    const field = name.replace(/_(after|before)$/, '_at');
    const t = value as number;
    if (name.endsWith('_after'))
      return (x) => {
        const v = get(x, field) as number | null;
        return v !== null && v >= t;
      };
    return (x) => {
      const v = get(x, field) as number | null;
      return v !== null && v < t;
    };
  }
  if (name === 'get_latest_result') return value ? (x) => get(x, 'is_latest') === true : () => true;
  if (typeof value === 'boolean') return (x) => get(x, name) === value;
  const wanted = new Set<number | string>(value as readonly (number | string)[]);
  return (x) => {
    const v = get(x, name);
    if (Array.isArray(v)) return v.some((e) => wanted.has(e));
    return v === null ? wanted.has(0) : wanted.has(v as number | string); // assignee_id=0: unassigned
  };
}

/** Candidates (sorted by created_at ascending) → the filtered items in the requested order. */
function selectItems<T>(world: World, kind: Kind<T>, candidates: readonly T[], req: CanonicalRequest): T[] {
  const { created_after, created_before, ...rest } = req.filters;
  const [lo, hi] = createdRange(world, kind, candidates, created_after as number | undefined, created_before as number | undefined);
  const predicates = Object.entries(rest).map(([name, value]) => compileFilter(world, kind, name, value));
  const items: T[] = [];
  for (let i = lo; i < hi; i++) {
    const item = candidates[i]!;
    if (predicates.every((p) => p(item))) items.push(item);
  }
  if (req.sort === '') return items; // id order
  const desc = req.order === 'desc';
  const field = req.sort.slice(req.sort.indexOf(':') + 1);
  if (field === 'created_at') return desc ? items.reverse() : items;
  const key = (x: T) => kind.field(x, field, world) as number | null;
  const sign = desc ? -1 : 1;
  return items
    .map((item) => ({ item, k: key(item) ?? -Infinity, id: kind.id(item) }))
    .sort((a, b) => sign * (a.k === b.k ? a.id - b.id : a.k < b.k ? -1 : 1))
    .map((e) => e.item);
}

/** The list envelope with all eight fields, in the spec's order. */
function makeListBody<T>(world: World, kind: Kind<T>, items: readonly T[], req: CanonicalRequest): string {
  const total = items.length;
  const perPage = req.perPage;
  const lastPage = total === 0 ? null : Math.ceil(total / perPage);
  const page = lastPage === null ? null : req.page;
  const pageItems = page === null ? [] : items.slice((page - 1) * perPage, page * perPage);
  const prev = page !== null && page > 1 ? page - 1 : null;
  const next = page !== null && lastPage !== null && page < lastPage ? page + 1 : null;
  const result = pageItems.map((x) => kind.json(x, world)).join(',');
  return (
    `{"page":${page},"prev_page":${prev},"next_page":${next},"last_page":${lastPage},` +
    `"per_page":${perPage},"total":${total},"result":[${result}],` +
    `"expands":${makeExpands(world, kind, pageItems, req.expands)}}`
  );
}

export function makeSingleBody<T>(world: World, kind: Kind<T>, item: T, req: CanonicalRequest): string {
  return `{"result":${kind.json(item, world)},"expands":${makeExpands(world, kind, [item], req.expands)}}`;
}

export function listBody<T>(world: World, kind: Kind<T>, candidates: readonly T[], req: CanonicalRequest): string {
  return makeListBody(world, kind, selectItems(world, kind, candidates, req), req);
}
