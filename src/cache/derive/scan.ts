/**
 * What the index of derived answers needs of a list page, read without parsing it: the `id` (and
 * `project_id`) of each item of its `result`, and whether the page is the list envelope at all
 * (spec, List envelope: `page` null or an integer, `per_page` and `total` integers, `result` an
 * array of objects each with an integer `id`, `expands` an object of arrays).
 *
 * Every list stored is indexed, but few are ever derived from: `JSON.parse` of a 100-run page
 * (87 KB) builds some hundred KB of objects the index drops at once, which cost a list miss more
 * CPU than the rest of its storing (`npm run bench -- profile:miss`). This walks the bytes
 * instead: strings are skipped with `indexOf` (native), nested values by depth, and nothing but
 * the numbers asked for is allocated. The full parse happens only when an answer is derived
 * (index.ts `parsed`).
 *
 * It agrees with `JSON.parse` on what it returns: the last of duplicate keys wins, a key spelled
 * with escapes (`"i\u0064"`) is decoded, a number is read as `Number` reads it. It does not
 * validate the whole text: a body that is not JSON may be taken for a list here, and is then
 * refused by the parse when an answer would be derived from it (nothing is derived from it).
 */

export interface ScannedPage {
  /** Each item's `id`, in order. */
  readonly ids: number[];
  /** Each item's `project_id` where it is an integer, in order (undefined where not). */
  readonly projects: (number | undefined)[];
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;
const COMMA = 0x2c;
const COLON = 0x3a;

/** The names read of the envelope and of an item, as `#key` gives them (their index). */
const ENVELOPE_KEYS = ['result', 'page', 'per_page', 'total', 'expands'].map((name) => Buffer.from(name, 'latin1'));
const [RESULT, PAGE, PER_PAGE, TOTAL, EXPANDS] = [0, 1, 2, 3, 4];
const ITEM_KEYS = ['id', 'project_id'].map((name) => Buffer.from(name, 'latin1'));
const [ID, PROJECT_ID] = [0, 1];
const NO_KEYS: readonly Buffer[] = [];

/** Thrown inside the scan when the text is not what the envelope needs: the page is not indexed. */
class NotAList extends Error {}
const NOT_A_LIST = new NotAList();

/** The items' ids and projects of a list page; undefined when the body is not the list envelope. */
export function scanPage(body: Buffer): ScannedPage | undefined {
  try {
    return new Scanner(body).page();
  } catch (err) {
    if (err === NOT_A_LIST) return undefined;
    throw err;
  }
}

class Scanner {
  #i = 0;
  constructor(private readonly b: Buffer) {}

  page(): ScannedPage {
    let page: unknown;
    let perPage: unknown;
    let total: unknown;
    let result: ScannedPage | undefined;
    let expandsOk = false;
    this.#expect(OPEN_OBJECT);
    this.#members(ENVELOPE_KEYS, (key) => {
      if (key === RESULT) result = this.#items();
      else if (key === PAGE) page = this.#scalar();
      else if (key === PER_PAGE) perPage = this.#scalar();
      else if (key === TOTAL) total = this.#scalar();
      else if (key === EXPANDS) expandsOk = this.#expands();
      else this.#skipValue();
    });
    this.#ws();
    if (this.#i !== this.b.length) throw NOT_A_LIST;
    if (!(page === null || Number.isSafeInteger(page)) || !Number.isSafeInteger(perPage) || !Number.isSafeInteger(total)) throw NOT_A_LIST;
    if (result === undefined || !expandsOk) throw NOT_A_LIST;
    return result;
  }

  /** `result`: an array of objects, each with an integer `id`. */
  #items(): ScannedPage {
    const ids: number[] = [];
    const projects: (number | undefined)[] = [];
    this.#expect(OPEN_ARRAY);
    this.#elements(() => {
      let id: unknown;
      let project: unknown;
      this.#expect(OPEN_OBJECT);
      this.#members(ITEM_KEYS, (key) => {
        if (key === ID) id = this.#scalar();
        else if (key === PROJECT_ID) project = this.#scalar();
        else this.#skipValue();
      });
      if (!Number.isSafeInteger(id)) throw NOT_A_LIST;
      ids.push(id as number);
      projects.push(typeof project === 'number' && Number.isSafeInteger(project) ? project : undefined);
    });
    return { ids, projects };
  }

  /** `expands`: an object whose every value is an array. */
  #expands(): boolean {
    this.#ws();
    if (this.b[this.#i] !== OPEN_OBJECT) {
      this.#skipValue();
      return false;
    }
    this.#i++;
    let ok = true;
    this.#members(NO_KEYS, () => {
      this.#ws();
      if (this.b[this.#i] !== OPEN_ARRAY) ok = false;
      this.#skipValue();
    });
    return ok;
  }

  /** The members of an object whose `{` was read, each handed its (decoded) key with the cursor at its value; ends past `}`. */
  #members(names: readonly Buffer[], onMember: (key: number) => void): void {
    this.#ws();
    if (this.b[this.#i] === CLOSE_OBJECT) return void this.#i++;
    for (;;) {
      this.#ws();
      const key = this.#key(names);
      this.#ws();
      this.#expect(COLON);
      onMember(key);
      this.#ws();
      const c = this.b[this.#i++];
      if (c === CLOSE_OBJECT) return;
      if (c !== COMMA) throw NOT_A_LIST;
    }
  }

  /** The elements of an array whose `[` was read, each with the cursor at it; ends past `]`. */
  #elements(onElement: () => void): void {
    this.#ws();
    if (this.b[this.#i] === CLOSE_ARRAY) return void this.#i++;
    for (;;) {
      this.#ws();
      onElement();
      this.#ws();
      const c = this.b[this.#i++];
      if (c === CLOSE_ARRAY) return;
      if (c !== COMMA) throw NOT_A_LIST;
    }
  }

  /**
   * A key, as one of the names asked for (`names`, their bytes) or -1: compared as bytes when it
   * has no escape (every key the instance writes), else decoded as JSON.parse would.
   */
  #key(names: readonly Buffer[]): number {
    const b = this.b;
    const start = this.#i;
    if (b[start] !== QUOTE) throw NOT_A_LIST;
    const end = (this.#i = this.#skipString());
    const from = start + 1;
    const length = end - 1 - from;
    let escaped = false;
    for (let i = from; i < end - 1; i++) if (b[i] === BACKSLASH) escaped = true;
    if (escaped) {
      let key: string;
      try {
        key = JSON.parse(b.toString('utf8', start, end)) as string;
      } catch {
        throw NOT_A_LIST;
      }
      return names.findIndex((name) => name.toString('latin1') === key);
    }
    for (let k = 0; k < names.length; k++) {
      const name = names[k]!;
      if (name.length !== length) continue;
      let i = 0;
      while (i < length && b[from + i] === name[i]) i++;
      if (i === length) return k;
    }
    return -1;
  }

  /** A number, null, true or false, as JSON.parse reads it; a string or a nested value is skipped and read as undefined. */
  #scalar(): unknown {
    this.#ws();
    const c = this.b[this.#i];
    if (c === QUOTE || c === OPEN_OBJECT || c === OPEN_ARRAY) {
      this.#skipValue();
      return undefined;
    }
    const start = this.#i;
    this.#skipBare();
    // Digits only, of a safe length (every id and count the instance writes): read here.
    const length = this.#i - start;
    if (length > 0 && length < 16 && (c !== 0x30 || length === 1)) {
      let value = 0;
      let i = start;
      for (; i < this.#i; i++) {
        const d = this.b[i]! - 0x30;
        if (d < 0 || d > 9) break;
        value = value * 10 + d;
      }
      if (i === this.#i) return value;
    }
    const text = this.b.toString('latin1', start, this.#i);
    if (text === 'null') return null;
    if (text === 'true') return true;
    if (text === 'false') return false;
    // JSON's number grammar (Number alone would take '0x1f', ' ', 'Infinity').
    if (!JSON_NUMBER.test(text)) throw NOT_A_LIST;
    return Number(text);
  }

  #skipValue(): void {
    this.#ws();
    const c = this.b[this.#i];
    if (c === QUOTE) return void (this.#i = this.#skipString());
    if (c === OPEN_OBJECT || c === OPEN_ARRAY) return this.#skipNested();
    const start = this.#i;
    this.#skipBare();
    if (this.#i === start) throw NOT_A_LIST;
  }

  /** From `{` or `[` past its match: strings jumped over whole, brackets counted. */
  #skipNested(): void {
    const b = this.b;
    const n = b.length;
    let depth = 0;
    let i = this.#i;
    while (i < n) {
      const c = b[i++]!;
      if (c === QUOTE) {
        while (i < n) {
          const s = b[i++]!;
          if (s === QUOTE) break;
          if (s === BACKSLASH) i++;
        }
      } else if (c === OPEN_OBJECT || c === OPEN_ARRAY) depth++;
      else if ((c === CLOSE_OBJECT || c === CLOSE_ARRAY) && --depth === 0) {
        this.#i = i;
        return;
      }
    }
    throw NOT_A_LIST;
  }

  /** From a `"`: the index past its closing quote (a backslash escapes the byte after it). */
  #skipString(): number {
    const b = this.b;
    const n = b.length;
    let i = this.#i + 1;
    while (i < n) {
      const c = b[i]!;
      if (c === QUOTE) return i + 1;
      i += c === BACKSLASH ? 2 : 1;
    }
    throw NOT_A_LIST;
  }

  /** A bare token (number, true, false, null): up to the next delimiter or whitespace. */
  #skipBare(): void {
    const b = this.b;
    let i = this.#i;
    const n = b.length;
    while (i < n) {
      const c = b[i]!;
      if (c === COMMA || c === CLOSE_OBJECT || c === CLOSE_ARRAY || c === COLON || c <= 0x20) break;
      i++;
    }
    this.#i = i;
  }

  #ws(): void {
    const b = this.b;
    let i = this.#i;
    while (i < b.length) {
      const c = b[i]!;
      if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) break;
      i++;
    }
    this.#i = i;
  }

  #expect(c: number): void {
    this.#ws();
    if (this.b[this.#i] !== c) throw NOT_A_LIST;
    this.#i++;
  }
}

const JSON_NUMBER = /^-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?$/;
