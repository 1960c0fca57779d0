/**
 * Raw query string → canonical request, from the catalogue.
 *
 * Equal questions must produce byte-equal canonical queries, because the canonical query is both
 * the cache key's last part and what the proxy sends upstream on a miss:
 * - parameters sorted by name; repeated keys folded (`expands=users&expands=milestones`);
 * - lists split on commas, trimmed, deduplicated and sorted (ids numerically);
 * - booleans `1`/`true`/`0`/`false` → `1`/`0` (the spec's form);
 * - timestamps → ISO 8601 UTC with milliseconds and `Z`;
 * - defaults elided (`page=1`, `per_page=100`, `order=desc`, the operation's default `sort`);
 * - empty values dropped.
 * Every problem is collected into one ValidationError naming each parameter and its rule:
 * 400 for a malformed value, 422 for a well-formed value against a rule.
 */
import { DEFAULT_ORDER, DEFAULT_PER_PAGE, PER_PAGE_VALUES, type ExpandType, type Operation, type ParamSpec } from './catalogue.js';
import { ValidationError, type ParamProblem } from './errors.js';

export type Order = 'asc' | 'desc';
export type FilterValue = boolean | number | readonly number[] | readonly string[];

export interface CanonicalRequest {
  readonly op: Operation;
  readonly ids: Readonly<Record<string, number>>;
  /** Canonical query string without `?`; '' when every parameter is at its default. */
  readonly query: string;
  readonly page: number;
  readonly perPage: number;
  /** The sort field in effect (the operation's default when not given); '' when it has none. */
  readonly sort: string;
  readonly order: Order;
  readonly expands: readonly ExpandType[];
  /** Filters given, by name: booleans, timestamps (ms since epoch), id lists, string lists. */
  readonly filters: Readonly<Record<string, FilterValue>>;
  /** Names of parameters the operation does not define, sorted. */
  readonly unknown: readonly string[];
}

/** Splits a raw query string into name → values, keeping repeated keys in order. */
function parseQueryString(raw: string): Map<string, string[]> {
  const out = new Map<string, string[]>();
  if (raw.startsWith('?')) raw = raw.slice(1);
  if (raw === '') return out;
  for (const pair of raw.split('&')) {
    if (pair === '') continue;
    const eq = pair.indexOf('=');
    const name = decode(eq < 0 ? pair : pair.slice(0, eq));
    const value = eq < 0 ? '' : decode(pair.slice(eq + 1));
    const list = out.get(name);
    if (list) list.push(value);
    else out.set(name, [value]);
  }
  return out;
}

function decode(s: string): string {
  const plus = s.includes('+') ? s.replace(/\+/g, ' ') : s;
  if (!plus.includes('%')) return plus;
  try {
    return decodeURIComponent(plus);
  } catch {
    return plus; // a malformed escape stays as typed; validation then names the parameter
  }
}

/** A parameter's canonical value: the string sent upstream, and the typed value. */
interface Canonical {
  readonly text: string;
  readonly value: FilterValue | string;
}

type Parsed = Canonical | ParamProblem | null; // null: empty, dropped

export function normalizeRequest(op: Operation, ids: Readonly<Record<string, number>>, rawQuery: string): CanonicalRequest {
  const raw = parseQueryString(rawQuery);
  const problems: ParamProblem[] = [];
  const parts: string[] = [];
  const typed = new Map<string, FilterValue | string>();
  const unknown: string[] = [];

  for (const name of [...raw.keys()].sort()) {
    const spec = op.params.find((p) => p.name === name);
    if (!spec) {
      unknown.push(name);
      continue;
    }
    const parsed = parseParam(spec, raw.get(name)!);
    if (parsed === null) continue;
    if ('rule' in parsed) {
      problems.push(parsed);
      continue;
    }
    if (isDefault(spec, parsed.text)) continue;
    typed.set(name, parsed.value);
    parts.push(`${name}=${parsed.text}`);
  }
  if (problems.length > 0) throw new ValidationError(problems);

  const sortSpec = op.params.find((p) => p.kind === 'sort');
  const filters: Record<string, FilterValue> = {};
  for (const [name, value] of typed) {
    if (!['page', 'per_page', 'sort', 'order', 'expands'].includes(name)) filters[name] = value as FilterValue;
  }
  return {
    op,
    ids,
    query: parts.join('&'),
    page: (typed.get('page') as number | undefined) ?? 1,
    perPage: (typed.get('per_page') as number | undefined) ?? DEFAULT_PER_PAGE,
    sort: (typed.get('sort') as string | undefined) ?? (sortSpec?.kind === 'sort' ? sortSpec.default : ''),
    order: (typed.get('order') as Order | undefined) ?? DEFAULT_ORDER,
    expands: (typed.get('expands') as ExpandType[] | undefined) ?? [],
    filters,
    unknown,
  };
}

function isDefault(spec: ParamSpec, text: string): boolean {
  switch (spec.kind) {
    case 'page':
      return text === '1';
    case 'per_page':
      return text === String(DEFAULT_PER_PAGE);
    case 'order':
      return text === DEFAULT_ORDER;
    case 'sort':
      return text === spec.default;
    default:
      return false;
  }
}

/** Values of a list parameter: every occurrence split on commas, trimmed, empties dropped. */
function listItems(values: readonly string[]): string[] {
  const items: string[] = [];
  for (const v of values) for (const item of v.split(',')) if (item.trim() !== '') items.push(item.trim());
  return items;
}

function parseParam(spec: ParamSpec, values: readonly string[]): Parsed {
  switch (spec.kind) {
    case 'expands':
      return parseExpands(spec.values, listItems(values));
    case 'id_list':
      return parseIdList(spec.name, spec.min, spec.max, listItems(values));
    case 'string_list': {
      const items = [...new Set(listItems(values))].sort();
      return items.length === 0 ? null : { text: items.map(encodeItem).join(','), value: items };
    }
    default:
      return parseScalar(spec, values);
  }
}

/** A scalar given several times is folded when every occurrence means the same, else rejected. */
function parseScalar(spec: ParamSpec, values: readonly string[]): Parsed {
  let result: Parsed = null;
  for (const v of values) {
    if (v.trim() === '') continue;
    const one = parseScalarValue(spec, v.trim());
    if ('rule' in one) return one;
    if (result !== null && 'text' in result && result.text !== one.text) {
      return { param: spec.name, status: 422, rule: `The ${spec.name} must be given once.` };
    }
    result = one;
  }
  return result;
}

function parseScalarValue(spec: ParamSpec, v: string): Canonical | ParamProblem {
  const name = spec.name;
  switch (spec.kind) {
    case 'page': {
      const n = parseInteger(v);
      if (n === undefined) return { param: name, status: 400, rule: `The ${name} must be an integer.` };
      if (n < 1) return { param: name, status: 422, rule: `The ${name} must be at least 1.` };
      return { text: String(n), value: n };
    }
    case 'per_page': {
      const n = parseInteger(v);
      if (n === undefined) return { param: name, status: 400, rule: `The ${name} must be an integer.` };
      if (!(PER_PAGE_VALUES as readonly number[]).includes(n)) {
        return { param: name, status: 422, rule: `The ${name} must be one of ${PER_PAGE_VALUES.join(', ')}.` };
      }
      return { text: String(n), value: n };
    }
    case 'sort':
      if (!spec.values.includes(v)) {
        return { param: name, status: 422, rule: `The ${name} must be one of ${spec.values.join(', ')}.` };
      }
      return { text: v, value: v };
    case 'order':
      if (v !== 'asc' && v !== 'desc') return { param: name, status: 422, rule: `The ${name} must be one of asc, desc.` };
      return { text: v, value: v };
    case 'boolean':
      if (v === '1' || v === 'true') return { text: '1', value: true };
      if (v === '0' || v === 'false') return { text: '0', value: false };
      return { param: name, status: 422, rule: `The ${name} must be one of 0, 1, true, false.` };
    case 'timestamp': {
      const ms = parseTimestamp(v);
      if (ms === undefined) {
        return { param: name, status: 400, rule: `The ${name} must be an ISO 8601 date-time in UTC.` };
      }
      return { text: encodeItem(new Date(ms).toISOString()), value: ms };
    }
    default:
      throw new Error(`not a scalar parameter kind: ${spec.kind}`);
  }
}

function parseExpands(allowed: readonly ExpandType[], items: string[]): Parsed {
  if (items.length === 0) return null;
  const bad = items.filter((t) => !(allowed as readonly string[]).includes(t));
  if (bad.length > 0) {
    return {
      param: 'expands',
      status: 422,
      rule: `The expands must only contain ${allowed.join(', ')}; got ${[...new Set(bad)].join(', ')}.`,
    };
  }
  const types = [...new Set(items)].sort() as ExpandType[];
  return { text: types.join(','), value: types };
}

function parseIdList(name: string, min: number, max: number | undefined, items: string[]): Parsed {
  if (items.length === 0) return null;
  const ids = new Set<number>();
  for (const item of items) {
    const n = parseInteger(item);
    if (n === undefined) return { param: name, status: 400, rule: `The ${name} must be a comma-separated list of integers.` };
    if (n < min || (max !== undefined && n > max)) {
      const range = max === undefined ? `at least ${min}` : `between ${min} and ${max}`;
      return { param: name, status: 422, rule: `Each ${name} must be ${range}.` };
    }
    ids.add(n);
  }
  const sorted = [...ids].sort((a, b) => a - b);
  return { text: sorted.join(','), value: sorted };
}

const INTEGER_RE = /^-?[0-9]{1,15}$/;

function parseInteger(v: string): number | undefined {
  return INTEGER_RE.test(v) ? Number(v) : undefined;
}

// ISO 8601 date or date-time; a time without a zone is UTC, as the spec says timestamps are.
const TIMESTAMP_RE = /^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})?)?$/i;

/** ISO 8601 → ms since epoch; undefined when it is not a valid date-time. */
export function parseTimestamp(v: string): number | undefined {
  const m = TIMESTAMP_RE.exec(v);
  if (!m) return undefined;
  const [, y, mo, d, h = '00', mi = '00', s = '00', frac = '', zone = 'Z'] = m;
  const ms = frac === '' ? '000' : frac.slice(1, 4).padEnd(3, '0');
  const z = zone.toUpperCase() === 'Z' ? 'Z' : zone.length === 5 ? `${zone.slice(0, 3)}:${zone.slice(3)}` : zone;
  const iso = `${y}-${mo}-${d}T${h}:${mi}:${s}.${ms}${z}`;
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return undefined;
  // Date.parse rolls 2024-02-30 over to March: reject dates that do not round-trip.
  const check = new Date(Date.UTC(Number(y), Number(mo) - 1, Number(d)));
  if (check.getUTCDate() !== Number(d) || check.getUTCMonth() !== Number(mo) - 1) return undefined;
  if (Number(h) > 23 || Number(mi) > 59 || Number(s) > 59) return undefined;
  return t;
}

/** Percent-encodes one value for the canonical query; commas inside a list item are encoded too. */
function encodeItem(v: string): string {
  return encodeURIComponent(v);
}
