/**
 * What the index of derived answers needs of a list page, read without parsing it: the `id` (and
 * `project_id`) of each item of its `result`, and whether the page is the list envelope at all
 * (spec, List envelope: `page` null or an integer, `per_page` and `total` integers, `result` an
 * array of objects each with an integer `id`, `expands` an object of arrays).
 *
 * Every list stored is indexed, but few are ever derived from: `JSON.parse` of a 100-run page
 * (87 KB) builds some hundred KB of objects the index drops at once, which cost a list miss more
 * CPU than the rest of its storing (`npm run bench -- profile:miss`). This walks the bytes
 * instead, once: strings and nested values are skipped in tight loops (a string's bytes are read
 * once; whether a key held an escape is noted on the way), and nothing but the numbers asked for
 * is allocated. Plain functions that pass the position along, no closure per member: on the
 * 100-run page it costs about what a loop that only counts the page's quotes does, and about half
 * of JSON.parse. The loop over an object's members or an array's elements is written out in each
 * reader on purpose: helpers for the key and the separator, reporting through module state, cost
 * about a third more on that page. The full parse happens only when an answer is derived
 * (index.ts `parsed`).
 *
 * It agrees with `JSON.parse` on what it returns: the last of duplicate keys wins, a key spelled
 * with escapes (`"i\u0064"`) is decoded, a number is read as `Number` reads it. It does not
 * validate the whole text: a body that is not JSON may be taken for a list here, and is then
 * refused by the parse when an answer would be derived from it (nothing is derived from it).
 */

export interface ScannedPage {
  /** Each item's `id`, in order. */
  readonly ids: readonly number[];
  /** Each item's `project_id` where it is an integer, in order (undefined where not). */
  readonly projects: readonly (number | undefined)[];
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;
const COMMA = 0x2c;
const COLON = 0x3a;
const FAIL = -1;

const bytes = (name: string): Uint8Array => Uint8Array.from(Buffer.from(name, 'latin1'));
const RESULT = bytes('result');
const PAGE = bytes('page');
const PER_PAGE = bytes('per_page');
const TOTAL = bytes('total');
const EXPANDS = bytes('expands');
const ID = bytes('id');
const PROJECT_ID = bytes('project_id');
const ENVELOPE_NAMES = ['result', 'page', 'per_page', 'total', 'expands'];

// What a helper read besides the position it returns. Module state: a scan runs to its end
// synchronously and never re-enters, so one scan at a time uses them.
/** Where the last scalar read ended (scalar() returns its value). */
let scalarEnd = 0;
/** The items `items()` read last. */
let scanned: ScannedPage = { ids: [], projects: [] };
/** Whether the last string skipString passed over held a backslash. */
let escaped = false;
/** A value scalar() could not read as JSON reads it. */
const BAD = Symbol('bad');

/**
 * What was read of the bodies scanned lately, by body: a list filled when sharing by project is
 * read by the policy (its items' projects) and then by the index, and the second reading is this
 * look-up. Weak: a body dropped takes its reading with it.
 */
const readings = new WeakMap<Buffer, ScannedPage | null>();

/** The items' ids and projects of a list page; undefined when the body is not the list envelope. Read once per body. */
export function scanPage(body: Buffer): ScannedPage | undefined {
  let read = readings.get(body);
  if (read === undefined) readings.set(body, (read = scan(body) ?? null));
  return read ?? undefined;
}

function scan(b: Buffer): ScannedPage | undefined {
  const n = b.length;
  let i = ws(b, 0, n);
  if (b[i] !== OPEN_OBJECT) return undefined;
  let page: unknown;
  let perPage: unknown;
  let total: unknown;
  let result: ScannedPage | undefined;
  let expandsOk = false;
  i = ws(b, i + 1, n);
  if (b[i] === CLOSE_OBJECT) return undefined;
  for (;;) {
    if (b[i] !== QUOTE) return undefined;
    const keyEnd = skipString(b, i, n);
    if (keyEnd === FAIL) return undefined;
    const key = envelopeKey(b, i, keyEnd);
    i = ws(b, keyEnd, n);
    if (b[i] !== COLON) return undefined;
    i = ws(b, i + 1, n);
    if (key === 0) {
      i = items(b, i, n);
      if (i === FAIL) return undefined;
      result = scanned;
    } else if (key === 1 || key === 2 || key === 3) {
      const value = scalar(b, i, n);
      if (value === BAD) return undefined;
      i = scalarEnd;
      if (key === 1) page = value;
      else if (key === 2) perPage = value;
      else total = value;
    } else if (key === 4) {
      const end = expands(b, i, n);
      if (end === FAIL) {
        expandsOk = false;
        i = skipValue(b, i, n);
        if (i === FAIL) return undefined;
      } else {
        expandsOk = true;
        i = end;
      }
    } else {
      i = skipValue(b, i, n);
      if (i === FAIL) return undefined;
    }
    i = ws(b, i, n);
    const c = b[i++];
    if (c === CLOSE_OBJECT) break;
    if (c !== COMMA) return undefined;
    i = ws(b, i, n);
  }
  if (ws(b, i, n) !== n) return undefined;
  if (!(page === null || Number.isSafeInteger(page)) || !Number.isSafeInteger(perPage) || !Number.isSafeInteger(total)) return undefined;
  if (result === undefined || !expandsOk) return undefined;
  return result;
}

/** `result` from its first byte: an array of objects, each with an integer id (read into `scanned`); the index past it, or FAIL. */
function items(b: Buffer, i: number, n: number): number {
  if (b[i] !== OPEN_ARRAY) return FAIL;
  const page = { ids: [] as number[], projects: [] as (number | undefined)[] };
  i = ws(b, i + 1, n);
  if (b[i] === CLOSE_ARRAY) i++;
  else {
    for (;;) {
      i = item(b, i, n, page);
      if (i === FAIL) return FAIL;
      i = ws(b, i, n);
      const c = b[i++];
      if (c === CLOSE_ARRAY) break;
      if (c !== COMMA) return FAIL;
      i = ws(b, i, n);
    }
  }
  scanned = page;
  return i;
}

/** One item of `result` from its `{`: its id and project added to `page`; the index past its `}`, or FAIL. */
function item(b: Buffer, i: number, n: number, page: { ids: number[]; projects: (number | undefined)[] }): number {
  if (b[i] !== OPEN_OBJECT) return FAIL;
  let id: unknown;
  let project: unknown;
  i = ws(b, i + 1, n);
  if (b[i] === CLOSE_OBJECT) return FAIL; // no id
  for (;;) {
    if (b[i] !== QUOTE) return FAIL;
    const keyEnd = skipString(b, i, n);
    if (keyEnd === FAIL) return FAIL;
    const key = itemKey(b, i, keyEnd);
    i = ws(b, keyEnd, n);
    if (b[i] !== COLON) return FAIL;
    i = ws(b, i + 1, n);
    if (key === 0 || key === 1) {
      const value = scalar(b, i, n);
      if (value === BAD) return FAIL;
      i = scalarEnd;
      if (key === 0) id = value;
      else project = value;
    } else {
      i = skipValue(b, i, n);
      if (i === FAIL) return FAIL;
    }
    i = ws(b, i, n);
    const c = b[i++];
    if (c === CLOSE_OBJECT) break;
    if (c !== COMMA) return FAIL;
    i = ws(b, i, n);
  }
  if (!Number.isSafeInteger(id)) return FAIL;
  page.ids.push(id as number);
  page.projects.push(typeof project === 'number' && Number.isSafeInteger(project) ? project : undefined);
  return i;
}

/** `expands` from its first byte: an object whose every value is an array; the index past it, or FAIL (not such an object). */
function expands(b: Buffer, i: number, n: number): number {
  if (b[i] !== OPEN_OBJECT) return FAIL;
  i = ws(b, i + 1, n);
  if (b[i] === CLOSE_OBJECT) return i + 1;
  for (;;) {
    if (b[i] !== QUOTE) return FAIL;
    i = skipString(b, i, n);
    if (i === FAIL) return FAIL;
    i = ws(b, i, n);
    if (b[i] !== COLON) return FAIL;
    i = ws(b, i + 1, n);
    if (b[i] !== OPEN_ARRAY) return FAIL;
    i = skipNested(b, i, n);
    if (i === FAIL) return FAIL;
    i = ws(b, i, n);
    const c = b[i++];
    if (c === CLOSE_OBJECT) return i;
    if (c !== COMMA) return FAIL;
    i = ws(b, i, n);
  }
}

/** Which envelope name the key at `start` (its quote) up to `end` (past its quote) is: 0 result, 1 page, 2 per_page, 3 total, 4 expands, -1 another. */
function envelopeKey(b: Buffer, start: number, end: number): number {
  if (escaped) return ENVELOPE_NAMES.indexOf(decodedKey(b, start, end));
  if (same(b, start, end, RESULT)) return 0;
  if (same(b, start, end, PAGE)) return 1;
  if (same(b, start, end, PER_PAGE)) return 2;
  if (same(b, start, end, TOTAL)) return 3;
  if (same(b, start, end, EXPANDS)) return 4;
  return -1;
}

/** 0 id, 1 project_id, -1 another. */
function itemKey(b: Buffer, start: number, end: number): number {
  if (escaped) {
    const key = decodedKey(b, start, end);
    return key === 'id' ? 0 : key === 'project_id' ? 1 : -1;
  }
  if (same(b, start, end, ID)) return 0;
  if (same(b, start, end, PROJECT_ID)) return 1;
  return -1;
}

function decodedKey(b: Buffer, start: number, end: number): string {
  try {
    return JSON.parse(b.toString('utf8', start, end)) as string;
  } catch {
    return '';
  }
}

function same(b: Buffer, start: number, end: number, name: Uint8Array): boolean {
  if (end - start - 2 !== name.length) return false;
  for (let k = 0; k < name.length; k++) if (b[start + 1 + k] !== name[k]) return false;
  return true;
}

/** A number, null, true or false from `i`, as JSON.parse reads it (its end in scalarEnd); a string or nested value is skipped and read as undefined; BAD when neither. */
function scalar(b: Buffer, i: number, n: number): unknown {
  const c = b[i];
  if (c === QUOTE || c === OPEN_OBJECT || c === OPEN_ARRAY) {
    const end = skipValue(b, i, n);
    if (end === FAIL) return BAD;
    scalarEnd = end;
    return undefined;
  }
  const start = i;
  let value = 0;
  let digits = true;
  for (; i < n; i++) {
    const d = b[i]!;
    if (d === COMMA || d === CLOSE_OBJECT || d === CLOSE_ARRAY || d === COLON || d <= 0x20) break;
    if (d < 0x30 || d > 0x39) digits = false;
    else value = value * 10 + (d - 0x30);
  }
  scalarEnd = i;
  const length = i - start;
  if (length === 0) return BAD;
  // Digits only, of a safe length, no leading zero (every id and count the instance writes): read here.
  if (digits && length < 16 && (c !== 0x30 || length === 1)) return value;
  const text = b.toString('latin1', start, i);
  if (text === 'null') return null;
  if (text === 'true') return true;
  if (text === 'false') return false;
  if (!JSON_NUMBER.test(text)) return BAD;
  return Number(text);
}

function skipValue(b: Buffer, i: number, n: number): number {
  const c = b[i];
  if (c === QUOTE) return skipString(b, i, n);
  if (c === OPEN_OBJECT || c === OPEN_ARRAY) return skipNested(b, i, n);
  const start = i;
  for (; i < n; i++) {
    const d = b[i]!;
    if (d === COMMA || d === CLOSE_OBJECT || d === CLOSE_ARRAY || d === COLON || d <= 0x20) break;
  }
  return i === start ? FAIL : i;
}

/** From `{` or `[` past its match: strings jumped over whole, brackets counted; FAIL at the end of the text. */
function skipNested(b: Buffer, i: number, n: number): number {
  let depth = 0;
  while (i < n) {
    const c = b[i++]!;
    if (c === QUOTE) {
      while (i < n) {
        const s = b[i++]!;
        if (s === QUOTE) break;
        if (s === BACKSLASH) i++;
      }
    } else if (c === OPEN_OBJECT || c === OPEN_ARRAY) depth++;
    else if ((c === CLOSE_OBJECT || c === CLOSE_ARRAY) && --depth === 0) return i;
  }
  return FAIL;
}

/** From a `"`: the index past its closing quote (a backslash escapes the byte after it); FAIL at the end of the text. */
function skipString(b: Buffer, i: number, n: number): number {
  i++;
  escaped = false;
  while (i < n) {
    const c = b[i]!;
    if (c === QUOTE) return i + 1;
    if (c === BACKSLASH) {
      escaped = true;
      i += 2;
    } else i++;
  }
  return FAIL;
}

function ws(b: Buffer, i: number, n: number): number {
  while (i < n) {
    const c = b[i]!;
    if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) break;
    i++;
  }
  return i;
}

const JSON_NUMBER = /^-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?$/;
