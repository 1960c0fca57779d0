/**
 * The bodies of derived answers, made from a cached page exactly as the instance makes its own
 * (src/emulator/query.ts is the reference): the same fields in the same order, the envelope
 * computed by the same arithmetic, `expands` narrowed to what the answer's items reference
 * (src/api/references.ts). Pure: a page and a question in, the body or undefined (not certain) out.
 */
import type { ExpandType, ResourceName } from '../../api/catalogue.js';
import type { CanonicalRequest } from '../../api/normalize.js';
import { addReferences, hasReferences } from '../../api/references.js';
import type { ParsedPage } from '../../cache/derive/index.js';

type Item = Readonly<Record<string, unknown>>;

/** Whether a source asked with `had` holds every expand type of `wanted`. */
export function coversExpands(had: readonly ExpandType[], wanted: readonly ExpandType[]): boolean {
  return wanted.every((type) => had.includes(type));
}

/** Whether the page `had` asks for spans the whole range of the page `want` asks for (the same list), whatever the list's total. */
export function coversRange(had: CanonicalRequest, want: CanonicalRequest): boolean {
  return (had.page - 1) * had.perPage <= (want.page - 1) * want.perPage && want.page * want.perPage <= had.page * had.perPage;
}

/**
 * `{"result": item, "expands": {...}}`: one resource of `source`, with the expands `wanted`
 * (the source holds each of them: `coversExpands`). Undefined when a type cannot be narrowed.
 */
export function itemBody(resource: ResourceName, source: ParsedPage, item: Item, wanted: readonly ExpandType[]): string | undefined {
  const expands = narrowedExpands(resource, source, [item], source.result.length === 1, wanted);
  return expands === undefined ? undefined : `{"result":${JSON.stringify(item)},"expands":${expands}}`;
}

/**
 * The page `want` asks for, from the page `source` answered to `had` (the same list: filters,
 * sort and order; its expands covering `want`'s): undefined unless the source's items cover the
 * whole range asked for. A list's total alone answers an empty list and a page past the last.
 */
export function pageBody(resource: ResourceName, source: ParsedPage, had: CanonicalRequest, want: CanonicalRequest): string | undefined {
  const total = source.total;
  const perPage = want.perPage;
  if (total === 0) return listBody(null, perPage, 0, [], emptyExpands(want.expands));
  const lastPage = Math.ceil(total / perPage);
  const page = want.page;
  if (page > lastPage) return listBody(page, perPage, total, [], emptyExpands(want.expands));
  // The source's range of the whole list, [first, first + items), checked against what its envelope says.
  const first = (had.page - 1) * had.perPage;
  const held = source.result.length;
  if (source.perPage !== had.perPage || held !== Math.max(0, Math.min(had.page * had.perPage, total) - first)) return undefined;
  const from = (page - 1) * perPage;
  const to = Math.min(page * perPage, total);
  if (from < first || to > first + held) return undefined;
  const items = source.result.slice(from - first, to - first);
  const expands = narrowedExpands(resource, source, items, items.length === held, want.expands);
  return expands === undefined ? undefined : listBody(page, perPage, total, items, expands);
}

/** The list envelope, its fields in the spec's order; `page` null for an empty list. */
function listBody(page: number | null, perPage: number, total: number, items: readonly Item[], expands: string): string {
  const lastPage = total === 0 ? null : Math.ceil(total / perPage);
  const prev = page !== null && page > 1 ? page - 1 : null;
  const next = page !== null && lastPage !== null && page < lastPage ? page + 1 : null;
  return (
    `{"page":${page},"prev_page":${prev},"next_page":${next},"last_page":${lastPage},` +
    `"per_page":${perPage},"total":${total},"result":[${items.map((item) => JSON.stringify(item)).join(',')}],"expands":${expands}}`
  );
}

function emptyExpands(types: readonly ExpandType[]): string {
  return `{${types.map((type) => `${JSON.stringify(type)}:[]`).join(',')}}`;
}

/**
 * The `expands` object for `items` of `source`, per wanted type in the question's order: the
 * source's objects the items reference. `all`: the items are every item of the source, whose
 * objects are then theirs as they are (a type whose references the items do not show included).
 */
function narrowedExpands(resource: ResourceName, source: ParsedPage, items: readonly Item[], all: boolean, wanted: readonly ExpandType[]): string | undefined {
  const parts: string[] = [];
  for (const type of wanted) {
    const objects = source.expands[type];
    if (objects === undefined) return undefined;
    if (all) {
      parts.push(`${JSON.stringify(type)}:${JSON.stringify(objects)}`);
      continue;
    }
    if (!hasReferences(resource, type)) return undefined;
    const ids = new Set<number>();
    for (const item of items) addReferences(resource, type, item, ids);
    const kept = objects.filter((o) => o !== null && typeof o === 'object' && ids.has((o as { id?: unknown }).id as number));
    parts.push(`${JSON.stringify(type)}:${JSON.stringify(kept)}`);
  }
  return `{${parts.join(',')}}`;
}
