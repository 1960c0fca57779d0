/**
 * The list-page scan of the derivation index (src/cache/derive/scan.ts) against JSON.parse: on
 * seeded random pages (items with nested values, strings full of quotes, backslashes and
 * non-ASCII, keys spelled with escapes, duplicate keys, whitespace anywhere) it reads the same
 * ids and projects, and it takes a body for a list exactly when the parse's envelope check does.
 */
import { describe, expect, it } from 'vitest';
import { scanPage } from '../../src/cache/derive/scan.js';
import { Prng } from '../../src/emulator/prng.js';

/** What the index read of a page before the scan: the envelope check and the items' ids and projects, from JSON.parse. */
function parsed(text: string): { ids: number[]; projects: (number | undefined)[] } | undefined {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (value === null || typeof value !== 'object') return undefined;
  const { page, per_page: perPage, total, result, expands } = value as Record<string, unknown>;
  if (!(page === null || Number.isSafeInteger(page)) || !Number.isSafeInteger(perPage) || !Number.isSafeInteger(total)) return undefined;
  if (
    !Array.isArray(result) ||
    !result.every((item) => item !== null && typeof item === 'object' && !Array.isArray(item) && Number.isSafeInteger((item as { id?: unknown }).id))
  ) {
    return undefined;
  }
  if (expands === null || typeof expands !== 'object' || Array.isArray(expands) || !Object.values(expands).every((x) => Array.isArray(x))) return undefined;
  const items = result as Record<string, unknown>[];
  return {
    ids: items.map((item) => item['id'] as number),
    projects: items.map((item) => (Number.isSafeInteger(item['project_id']) ? (item['project_id'] as number) : undefined)),
  };
}

const STRING_PARTS = ['a', 'run "7"', '\\', '\\"', 'é', '名前', '😀', '\n', '\t', '\u0000', '}', ']', '{"id":9}', ',', ':', '\\u0069d'];

/** A JSON text of a value, with random whitespace between its tokens. */
class Writer {
  constructor(private readonly r: Prng) {}

  ws(): string {
    return this.r.chance(0.2) ? this.r.pick([' ', '\n', '\t ', '\r\n  ']) : '';
  }

  string(): string {
    let s = '';
    for (let i = this.r.int(0, 4); i > 0; i--) s += this.r.pick(STRING_PARTS);
    return JSON.stringify(s);
  }

  /** A key, sometimes spelled with a JSON escape (`"i\u0064"` is `id`). */
  key(name: string): string {
    if (name.length > 0 && this.r.chance(0.1)) {
      const at = this.r.int(0, name.length - 1);
      return `"${name.slice(0, at)}\\u${name.charCodeAt(at).toString(16).padStart(4, '0')}${name.slice(at + 1)}"`;
    }
    return JSON.stringify(name);
  }

  number(): string {
    return this.r.pick([String(this.r.int(0, 100_000)), '-3', '0', '1.5', '2e3', '7.0', '1E2', '9007199254740993', '-0']);
  }

  value(depth: number): string {
    const kind = this.r.int(0, depth > 2 ? 3 : 5);
    if (kind === 0) return this.string();
    if (kind === 1) return this.number();
    if (kind === 2) return this.r.pick(['true', 'false', 'null']);
    if (kind === 3) return this.string();
    if (kind === 4) return this.array(depth + 1);
    return this.object(depth + 1, []);
  }

  array(depth: number): string {
    const values = Array.from({ length: this.r.int(0, 3) }, () => this.ws() + this.value(depth) + this.ws());
    return `[${values.join(',')}${values.length === 0 ? this.ws() : ''}]`;
  }

  object(depth: number, members: [string, string][]): string {
    const all: [string, string][] = [...members];
    for (let i = this.r.int(0, 3); i > 0; i--)
      all.splice(this.r.int(0, all.length), 0, [this.r.pick(['name', 'tags', 'id_x', 'project', 'ids', '']), this.value(depth)]);
    return `{${all.map(([k, v]) => `${this.ws()}${this.key(k)}${this.ws()}:${this.ws()}${v}${this.ws()}`).join(',')}}`;
  }

  item(): string {
    const members: [string, string][] = [];
    if (this.r.chance(0.97)) members.push(['id', this.r.chance(0.95) ? String(this.r.int(1, 10_000)) : this.value(1)]);
    if (this.r.chance(0.8)) members.push(['project_id', this.r.chance(0.9) ? String(this.r.int(1, 50)) : this.value(1)]);
    // A duplicate key: JSON.parse keeps the last.
    if (this.r.chance(0.05)) members.push(['id', String(this.r.int(1, 10_000))]);
    if (this.r.chance(0.05)) members.push(['project_id', this.r.pick(['null', '3', '"3"'])]);
    return this.object(1, members);
  }

  page(): string {
    const members: [string, string][] = [];
    const items = Array.from({ length: this.r.int(0, 6) }, () => this.item());
    if (this.r.chance(0.97)) members.push(['result', this.r.chance(0.97) ? `[${items.join(',')}]` : this.value(1)]);
    if (this.r.chance(0.98)) members.push(['page', this.r.chance(0.9) ? this.r.pick(['1', '2', 'null']) : this.value(1)]);
    if (this.r.chance(0.98)) members.push(['per_page', this.r.chance(0.95) ? String(this.r.int(1, 250)) : this.value(1)]);
    if (this.r.chance(0.98)) members.push(['total', this.r.chance(0.95) ? String(this.r.int(0, 500)) : this.value(1)]);
    if (this.r.chance(0.97)) {
      const expands = this.r.chance(0.95) ? `{${this.r.chance(0.5) ? `"users":${this.array(1)}` : ''}}` : this.value(1);
      members.push(['expands', expands]);
    }
    members.push(['next_page', this.r.pick(['null', '2'])]);
    return this.ws() + this.object(0, members) + this.ws();
  }
}

describe('scanPage', () => {
  it('reads what JSON.parse reads of 5,000 seeded random pages, and refuses what it refuses', () => {
    let lists = 0;
    for (let seed = 1; seed <= 5_000; seed++) {
      const text = new Writer(new Prng(seed)).page();
      const expected = parsed(text);
      if (expected !== undefined) lists++;
      expect({ seed, scanned: scanPage(Buffer.from(text)) }).toEqual({ seed, scanned: expected });
    }
    // Both kinds were drawn: about half the pages are lists.
    expect(lists).toBeGreaterThan(2_000);
    expect(lists).toBeLessThan(4_000);
  });

  it.each([
    ['not JSON at all', 'not json'],
    ['an array', '[1,2]'],
    ['truncated', '{"page":1,"per_page":10,"total":1,"result":[{"id":1}],"expands":{'],
    ['trailing text', '{"page":1,"per_page":10,"total":0,"result":[],"expands":{}} x'],
    ['an unterminated string', '{"page":1,"per_page":10,"total":0,"result":[],"expands":{"a":"]}'],
    ['a number JSON does not write', '{"page":1,"per_page":0x1f,"total":0,"result":[],"expands":{}}'],
    ['an item that is an array', '{"page":1,"per_page":10,"total":1,"result":[[1]],"expands":{}}'],
    ['an id that is a string', '{"page":1,"per_page":10,"total":1,"result":[{"id":"1"}],"expands":{}}'],
    ['an expands value that is not an array', '{"page":1,"per_page":10,"total":0,"result":[],"expands":{"users":{}}}'],
  ])('refuses %s', (_name, text) => {
    expect(parsed(text)).toBeUndefined();
    expect(scanPage(Buffer.from(text))).toBeUndefined();
  });

  it('reads a key spelled with escapes, the last of duplicate keys, and skips ids inside strings and nested values', () => {
    const text =
      '{"r\\u0065sult":[{"id":1,"note":"{\\"id\\":99}","project_id":3,"id":2,"nested":{"id":77,"project_id":[5]}}],' +
      '"page":null,"per_page":1,"total":1,"expands":{"users":[{"id":8}]}}';
    expect(scanPage(Buffer.from(text))).toEqual({ ids: [2], projects: [3] });
    expect(parsed(text)).toEqual({ ids: [2], projects: [3] });
  });
});
