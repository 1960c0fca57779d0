/**
 * A small evaluator of Go templates, enough to render this chart without helm (which cannot be
 * installed here): text with `{{- -}}` trimming, comments, if/else if/else, with, range, define,
 * include, variables, pipelines, parentheses, and the Sprig/Helm functions the chart uses.
 *
 * It is stricter than helm where helm's leniency hides a bug: an unknown function, a field of a
 * missing value (`.Values.nope.x`), a comparison of a values.yaml number (a float64 in helm)
 * with an integer, or `%d` of a float all throw. Numbers follow helm: what values.yaml holds is a
 * float64 (a JS number, printed like Go's %v: 1000000 prints as 1e+06), what `int`, `mul`, `add`
 * and literals make is an int (a bigint here).
 */
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse as parseYaml, stringify as stringifyYaml } from 'yaml';

type Value = unknown;
type Scope = Map<string, Value>[];

interface TextNode {
  kind: 'text';
  text: string;
}
interface ActionNode {
  kind: 'action';
  pipe: Pipe;
  line: number;
}
interface BlockNode {
  kind: 'if' | 'with' | 'range';
  branches: { pipe: Pipe; body: Node[] }[];
  otherwise: Node[];
  line: number;
}
type Node = TextNode | ActionNode | BlockNode;

/** `$a, $b := cmd | cmd`; `decl` empty for a plain pipeline. */
interface Pipe {
  decl: string[];
  assign: boolean;
  cmds: Operand[][];
}
type Operand =
  { t: 'lit'; v: Value } | { t: 'field'; base: 'dot' | string; path: string[] } | { t: 'fn'; name: string } | { t: 'sub'; pipe: Pipe; path: string[] };

export interface Chart {
  readonly dir: string;
  readonly defines: Map<string, Node[]>;
  readonly templates: Map<string, Node[]>;
}

// ---- lexing and parsing ---------------------------------------------------------------------

interface Raw {
  kind: 'text';
  text: string;
}
interface RawAction {
  kind: 'action';
  body: string;
  line: number;
}

function split(text: string): (Raw | RawAction)[] {
  const parts: (Raw | RawAction)[] = [];
  let at = 0;
  let trimNext = false;
  while (at <= text.length) {
    const open = text.indexOf('{{', at);
    let chunk = text.slice(at, open === -1 ? text.length : open);
    if (trimNext) chunk = chunk.replace(/^\s+/, '');
    if (open === -1) {
      parts.push({ kind: 'text', text: chunk });
      break;
    }
    const trimLeft = /^\{\{-\s/.test(text.slice(open, open + 4));
    if (trimLeft) chunk = chunk.replace(/\s+$/, '');
    parts.push({ kind: 'text', text: chunk });
    const start = open + (trimLeft ? 3 : 2);
    const isComment = text.slice(start).trimStart().startsWith('/*');
    const close = isComment ? text.indexOf('}}', text.indexOf('*/', start) + 2) : actionEnd(text, start);
    if (close === -1) throw new Error(`unclosed action at line ${lineOf(text, open)}`);
    trimNext = /\s-$/.test(text.slice(start, close));
    const body = text.slice(start, trimNext ? close - 1 : close).trim();
    if (!isComment) parts.push({ kind: 'action', body, line: lineOf(text, open) });
    at = close + 2;
  }
  return parts;
}

/** Where the `}}` closing an action is, skipping quoted strings (`{{ "}}" }}` prints braces); -1 when none. */
export function actionEnd(text: string, from: number): number {
  for (let i = from; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      for (i++; i < text.length && text[i] !== '"' && text[i] !== '\n'; i++) if (text[i] === '\\') i++;
    } else if (c === '`') {
      i = text.indexOf('`', i + 1);
      if (i === -1) return -1;
    } else if (c === '}' && text[i + 1] === '}') return i;
  }
  return -1;
}

const lineOf = (text: string, offset: number) => text.slice(0, offset).split('\n').length;

const TOKEN =
  /\s*(?:("(?:[^"\\]|\\.)*")|(`[^`]*`)|(:=|=|\||\(|\)|,)|(\$[A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)|(\.(?:[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)*)?)|(-?\d+(?:\.\d+)?)|([A-Za-z_][A-Za-z0-9_]*))/y;

function tokenize(body: string): string[] {
  const tokens: string[] = [];
  TOKEN.lastIndex = 0;
  while (TOKEN.lastIndex < body.length) {
    const start = TOKEN.lastIndex;
    const m = TOKEN.exec(body);
    if (m === null) {
      if (body.slice(start).trim() === '') break;
      throw new Error(`cannot read {{ ${body} }} at ${JSON.stringify(body.slice(start))}`);
    }
    // `(x).field` (no space) reads a field of x; `(x) .field` is another operand.
    const glued = tokens.at(-1) === ')' && m[0].startsWith('.');
    tokens.push(glued ? `~${m[0]}` : m[0].trim());
  }
  return tokens;
}

function parsePipe(tokens: string[], line: number): Pipe {
  let decl: string[] = [];
  let assign = false;
  const declAt = tokens.findIndex((t) => t === ':=' || t === '=');
  if (declAt !== -1 && tokens.slice(0, declAt).every((t) => t.startsWith('$') || t === ',')) {
    decl = tokens.slice(0, declAt).filter((t) => t !== ',');
    assign = tokens[declAt] === '=';
    tokens = tokens.slice(declAt + 1);
  }
  const pos = { i: 0 };
  const cmds = parseCommands(tokens, pos, line);
  if (pos.i !== tokens.length) throw new Error(`line ${line}: unexpected ${tokens[pos.i]}`);
  return { decl, assign, cmds };
}

function parseCommands(tokens: string[], pos: { i: number }, line: number): Operand[][] {
  const cmds: Operand[][] = [[]];
  while (pos.i < tokens.length && tokens[pos.i] !== ')') {
    const tok = tokens[pos.i++]!;
    if (tok === '|') {
      cmds.push([]);
      continue;
    }
    cmds.at(-1)!.push(operandOf(tok, tokens, pos, line));
  }
  if (cmds.some((c) => c.length === 0)) throw new Error(`line ${line}: empty command in pipeline`);
  return cmds;
}

function operandOf(tok: string, tokens: string[], pos: { i: number }, line: number): Operand {
  if (tok === '(') {
    const pipe: Pipe = { decl: [], assign: false, cmds: parseCommands(tokens, pos, line) };
    if (tokens[pos.i++] !== ')') throw new Error(`line ${line}: unclosed (`);
    let path: string[] = [];
    if (tokens[pos.i]?.startsWith('~.')) path = tokens[pos.i++]!.slice(2).split('.');
    return { t: 'sub', pipe, path };
  }
  if (tok.startsWith('"')) return { t: 'lit', v: JSON.parse(tok) };
  if (tok.startsWith('`')) return { t: 'lit', v: tok.slice(1, -1) };
  if (/^-?\d+$/.test(tok)) return { t: 'lit', v: BigInt(tok) };
  if (/^-?\d/.test(tok)) return { t: 'lit', v: Number(tok) };
  if (tok === 'true' || tok === 'false') return { t: 'lit', v: tok === 'true' };
  if (tok === 'nil') return { t: 'lit', v: null };
  if (tok.startsWith('$')) {
    const [name, ...path] = tok.split('.');
    return { t: 'field', base: name!, path };
  }
  if (tok.startsWith('.')) return { t: 'field', base: 'dot', path: tok === '.' ? [] : tok.slice(1).split('.') };
  if (/^[A-Za-z_]/.test(tok)) return { t: 'fn', name: tok };
  throw new Error(`line ${line}: unexpected ${tok}`);
}

/** Parses a template into nodes; `define` blocks go to `defines`. */
function parseTemplate(text: string, defines: Map<string, Node[]>): Node[] {
  const parts = split(text);
  let i = 0;
  const parseUntil = (stops: RegExp): { nodes: Node[]; stop?: RawAction } => {
    const nodes: Node[] = [];
    while (i < parts.length) {
      const part = parts[i++]!;
      if (part.kind === 'text') {
        if (part.text !== '') nodes.push(part);
        continue;
      }
      const keyword = /^(if|with|range|define|else|end)\b/.exec(part.body)?.[1];
      if (keyword === 'else' || keyword === 'end') {
        if (!stops.test(keyword)) throw new Error(`line ${part.line}: unexpected {{ ${part.body} }}`);
        return { nodes, stop: part };
      }
      if (keyword === 'define') {
        const name = JSON.parse(part.body.slice('define'.length).trim()) as string;
        const body = parseUntil(/^end$/);
        if (body.stop === undefined) throw new Error(`line ${part.line}: define without end`);
        defines.set(name, body.nodes);
        continue;
      }
      if (keyword === 'if' || keyword === 'with' || keyword === 'range') {
        const block: BlockNode = { kind: keyword, branches: [], otherwise: [], line: part.line };
        let cond = part.body.slice(keyword.length);
        for (;;) {
          const body = parseUntil(/^(else|end)$/);
          if (body.stop === undefined) throw new Error(`line ${part.line}: {{ ${part.body} }} without end`);
          block.branches.push({ pipe: parsePipe(tokenize(cond), part.line), body: body.nodes });
          if (body.stop.body === 'end') break;
          const elseIf = /^else\s+if\s(.*)$/s.exec(body.stop.body);
          if (elseIf !== null && keyword === 'if') {
            cond = elseIf[1]!;
            continue;
          }
          if (body.stop.body !== 'else') throw new Error(`line ${body.stop.line}: unsupported {{ ${body.stop.body} }}`);
          const rest = parseUntil(/^end$/);
          if (rest.stop === undefined) throw new Error(`line ${part.line}: else without end`);
          block.otherwise = rest.nodes;
          break;
        }
        nodes.push(block);
        continue;
      }
      nodes.push({ kind: 'action', pipe: parsePipe(tokenize(part.body), part.line), line: part.line });
    }
    return { nodes };
  };
  const { nodes, stop } = parseUntil(/^$/);
  if (stop !== undefined) throw new Error(`line ${stop.line}: unexpected {{ ${stop.body} }}`);
  return nodes;
}

function loadChart(dir: string): Chart {
  const defines = new Map<string, Node[]>();
  const templates = new Map<string, Node[]>();
  const chartName = (parseYaml(readFileSync(join(dir, 'Chart.yaml'), 'utf8')) as { name: string }).name;
  for (const name of readdirSync(join(dir, 'templates')).sort()) {
    if (!/\.(yaml|tpl|txt)$/.test(name)) continue;
    const nodes = parseTemplate(readFileSync(join(dir, 'templates', name), 'utf8'), defines);
    // Every file is also a named template, by its path: include (print $.Template.BasePath "/x.yaml") .
    defines.set(`${chartName}/templates/${name}`, nodes);
    if (!name.startsWith('_')) templates.set(name, nodes);
  }
  return { dir, defines, templates };
}

// ---- values as Go sees them -----------------------------------------------------------------

const isMap = (v: Value): v is Record<string, Value> => typeof v === 'object' && v !== null && !Array.isArray(v);

function truthy(v: Value): boolean {
  if (v === null || v === undefined || v === false || v === '' || v === 0 || v === 0n) return false;
  if (Array.isArray(v)) return v.length > 0;
  if (isMap(v)) return Object.keys(v).length > 0;
  return true;
}

/** Go's %v of a float64 (strconv 'g', shortest): exponent form when the exponent is < -4 or ≥ 6, so 1000000 prints as 1e+06. */
function goFloat(n: number): string {
  if (n === 0 || !Number.isFinite(n)) return String(n);
  const exp = Math.floor(Math.log10(Math.abs(n)));
  if (exp >= -4 && exp < 6) return String(n);
  return n.toExponential().replace(/e([+-])(\d)$/, 'e$10$2');
}

function goString(v: Value): string {
  if (v === null || v === undefined) return '';
  if (typeof v === 'number') return goFloat(v);
  if (typeof v === 'bigint' || typeof v === 'boolean' || typeof v === 'string') return String(v);
  if (Array.isArray(v)) return `[${v.map(goString).join(' ')}]`;
  if (isMap(v))
    return `map[${Object.keys(v)
      .sort()
      .map((k) => `${k}:${goString(v[k])}`)
      .join(' ')}]`;
  return String(v);
}

function toInt(v: Value): bigint {
  if (typeof v === 'bigint') return v;
  if (typeof v === 'number') return BigInt(Math.trunc(v));
  if (typeof v === 'string' && /^-?\d+$/.test(v.trim())) return BigInt(v.trim());
  if (typeof v === 'boolean') return v ? 1n : 0n;
  return 0n;
}

/** Plain data for YAML/JSON output: ints become numbers. */
function plain(v: Value): Value {
  if (typeof v === 'bigint') return Number(v);
  if (Array.isArray(v)) return v.map(plain);
  if (isMap(v)) return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, plain(x)]));
  return v;
}

function compare(name: string, a: Value, b: Value): number {
  const kind = (x: Value) => (typeof x === 'bigint' ? 'int' : typeof x === 'number' ? 'float' : typeof x);
  if (kind(a) !== kind(b)) throw new Error(`${name}: incompatible types for comparison (${kind(a)} and ${kind(b)}): use int on values.yaml numbers`);
  return a === b ? 0 : (a as number) < (b as number) ? -1 : 1;
}

function printf(format: string, ...args: Value[]): string {
  let i = 0;
  return format.replace(/%([sdvq%])/g, (_, verb: string) => {
    if (verb === '%') return '%';
    const arg = args[i++];
    if (verb === 'd') {
      if (typeof arg !== 'bigint') throw new Error(`printf %d of ${typeof arg} ${goString(arg)}: helm prints %!d(float64=...); use int`);
      return String(arg);
    }
    return verb === 'q' ? JSON.stringify(goString(arg)) : goString(arg);
  });
}

const indentLines = (n: Value, s: Value) => {
  const pad = ' '.repeat(Number(n));
  return pad + goString(s).replace(/\n/g, `\n${pad}`);
};

function toYaml(v: Value): string {
  if (v === null || v === undefined) return 'null';
  return stringifyYaml(plain(v), { indentSeq: false, sortMapEntries: true, lineWidth: 0 }).replace(/\n$/, '');
}

// ---- evaluation -----------------------------------------------------------------------------

export interface Root {
  Values: Record<string, Value>;
  Release: { Name: string; Namespace: string; Service: string };
  Chart: { Name: string; Version: string; AppVersion: string };
  Template: { BasePath: string; Name?: string };
  Files: { Get: (path: string) => string };
}

class Renderer {
  constructor(
    private readonly chart: Chart,
    private readonly root: Root,
  ) {}

  render(name: string): string {
    const nodes = this.chart.templates.get(name);
    if (nodes === undefined) throw new Error(`no template ${name}`);
    const root = { ...this.root, Template: { ...this.root.Template, Name: `${this.root.Template.BasePath}/${name}` } };
    return this.run(nodes, root, [new Map([['$', root]])]).replaceAll('<no value>', '');
  }

  include(name: string): string {
    return goString(this.call('include', [name, this.root]));
  }

  renderAll(): Map<string, string> {
    return new Map([...this.chart.templates.keys()].map((name) => [name, this.render(name)]));
  }

  private run(nodes: readonly Node[], dot: Value, scope: Scope): string {
    let out = '';
    for (const node of nodes) {
      if (node.kind === 'text') out += node.text;
      else if (node.kind === 'action') {
        const value = this.pipe(node.pipe, dot, scope);
        if (node.pipe.decl.length === 0) out += goString(value);
      } else out += this.block(node, dot, scope);
    }
    return out;
  }

  private block(node: BlockNode, dot: Value, scope: Scope): string {
    const inner = (): Scope => [...scope, new Map()];
    for (const { pipe, body } of node.branches) {
      const s = inner();
      const value = this.pipe(pipe, dot, s);
      if (node.kind === 'range') {
        if (!truthy(value)) break;
        const entries: [Value, Value][] = Array.isArray(value)
          ? value.map((v, i) => [BigInt(i), v])
          : isMap(value)
            ? Object.keys(value)
                .sort()
                .map((k) => [k, value[k]])
            : [];
        let out = '';
        for (const [key, item] of entries) {
          const each = inner();
          if (pipe.decl.length === 2) {
            each.at(-1)!.set(pipe.decl[0]!, key);
            each.at(-1)!.set(pipe.decl[1]!, item);
          } else if (pipe.decl.length === 1) each.at(-1)!.set(pipe.decl[0]!, item);
          out += this.run(body, item, each);
        }
        return out;
      }
      if (truthy(value)) return this.run(body, node.kind === 'with' ? value : dot, s);
    }
    return this.run(node.otherwise, dot, inner());
  }

  private pipe(pipe: Pipe, dot: Value, scope: Scope): Value {
    let value: Value = undefined;
    pipe.cmds.forEach((cmd, i) => {
      value = this.command(cmd, dot, scope, i === 0 ? [] : [value]);
    });
    if (pipe.decl.length === 1) {
      const name = pipe.decl[0]!;
      const target = pipe.assign ? [...scope].reverse().find((m) => m.has(name)) : scope.at(-1);
      if (target === undefined) throw new Error(`undefined variable ${name}`);
      target.set(name, value);
    }
    return value;
  }

  private command(cmd: Operand[], dot: Value, scope: Scope, piped: Value[]): Value {
    const [head, ...rest] = cmd;
    if (head!.t === 'fn') {
      const args = [...rest.map((o) => this.operand(o, dot, scope)), ...piped];
      return this.call(head!.name, args);
    }
    const value = this.operand(head!, dot, scope);
    if (typeof value === 'function') return (value as (...a: Value[]) => Value)(...rest.map((o) => this.operand(o, dot, scope)), ...piped);
    if (rest.length > 0 || piped.length > 0) throw new Error(`${goString(value)} is not a function`);
    return value;
  }

  private operand(op: Operand, dot: Value, scope: Scope): Value {
    switch (op.t) {
      case 'lit':
        return op.v;
      case 'fn':
        return this.call(op.name, []);
      case 'sub':
        return this.walk(this.pipe(op.pipe, dot, scope), op.path, '(...)');
      case 'field': {
        if (op.base === 'dot') return this.walk(dot, op.path, '.');
        const holder = [...scope].reverse().find((m) => m.has(op.base));
        if (holder === undefined) throw new Error(`undefined variable ${op.base}`);
        return this.walk(holder.get(op.base), op.path, op.base);
      }
    }
  }

  private walk(value: Value, path: readonly string[], from: string): Value {
    let node = value;
    let at = from;
    for (const key of path) {
      if (node === null || node === undefined) throw new Error(`nil pointer evaluating ${at}.${key}`);
      if (!isMap(node)) throw new Error(`can't evaluate field ${key} in ${at} (${typeof node})`);
      node = Object.hasOwn(node, key) ? node[key] : undefined;
      at = `${at}.${key}`;
    }
    return node;
  }

  private call(name: string, a: Value[]): Value {
    const fn = FUNCTIONS[name];
    if (name === 'include') {
      const body = this.chart.defines.get(a[0] as string);
      if (body === undefined) throw new Error(`include of an undefined template ${goString(a[0])}`);
      return this.run(body, a[1], [new Map([['$', a[1]]])]);
    }
    if (fn === undefined) throw new Error(`function "${name}" not defined (in this renderer)`);
    return fn(...a);
  }
}

/** The Sprig/helm functions the chart uses (mul is used by the renderer's own tests); include is the renderer's. */
const FUNCTIONS: Record<string, (...a: Value[]) => Value> = {
  toYaml,
  indent: indentLines,
  nindent: (n, s) => `\n${indentLines(n, s)}`,
  quote: (...v) =>
    v
      .filter((x) => x !== null && x !== undefined)
      .map((x) => JSON.stringify(goString(x)))
      .join(' '),
  default: (d, v) => (truthy(v) ? v : d),
  required: (msg, v) => {
    if (v === null || v === undefined || v === '') throw new Error(goString(msg));
    return v;
  },
  fail: (msg) => {
    throw new Error(goString(msg));
  },
  b64enc: (s) => Buffer.from(goString(s)).toString('base64'),
  sha256sum: (s) => createHash('sha256').update(goString(s)).digest('hex'),
  trunc: (n, s) => goString(s).slice(0, Number(n)),
  trimSuffix: (suffix, s) => (goString(s).endsWith(goString(suffix)) ? goString(s).slice(0, -goString(suffix).length || undefined) : goString(s)),
  replace: (from, to, s) => goString(s).replaceAll(goString(from), goString(to)),
  contains: (sub, s) => goString(s).includes(goString(sub)),
  printf: (f, ...args) => printf(goString(f), ...args),
  print: (...args) => args.map(goString).join(''),
  int: toInt,
  toString: goString,
  add: (...v) => v.reduce<bigint>((s, x) => s + toInt(x), 0n),
  sub: (a, b) => toInt(a) - toInt(b),
  mul: (...v) => v.reduce<bigint>((s, x) => s * toInt(x), 1n),
  div: (a, b) => toInt(a) / toInt(b),
  eq: (a, b) => compare('eq', a, b) === 0,
  le: (a, b) => compare('le', a, b) <= 0,
  lt: (a, b) => compare('lt', a, b) < 0,
  gt: (a, b) => compare('gt', a, b) > 0,
  not: (v) => !truthy(v),
  and: (...v) => v.find((x) => !truthy(x)) ?? v.at(-1),
  or: (...v) => v.find(truthy) ?? v.at(-1),
  list: (...v) => v,
  get: (d, key) => (isMap(d) && Object.hasOwn(d, goString(key)) ? d[goString(key)] : ''),
  /** Sprig's dig: `dig "a" "b" default map`; the default when a key is missing on the way. */
  dig: (...a) => {
    const keys = a.slice(0, -2).map(goString);
    let node = a.at(-1);
    for (const key of keys) {
      if (!isMap(node) || !Object.hasOwn(node, key)) return a.at(-2);
      node = node[key];
    }
    return node;
  },
  /** Go's regexp (RE2): the patterns the chart uses mean the same in JavaScript. */
  regexMatch: (re, s) => new RegExp(goString(re)).test(goString(s)),
  regexReplaceAll: (re, s, to) => goString(s).replace(new RegExp(goString(re), 'g'), goString(to)),
  dict: (...kv) => Object.fromEntries(Array.from({ length: kv.length / 2 }, (_, i) => [goString(kv[2 * i]), kv[2 * i + 1]])),
};

/** helm's `.Files.Get`: a file of the chart by its path inside the chart; "" when there is none. */
function chartFiles(dir: string): Root['Files'] {
  return {
    Get: (path: string) => {
      try {
        return readFileSync(join(dir, path), 'utf8');
      } catch {
        return '';
      }
    },
  };
}

// ---- the chart, rendered as `helm template` would -------------------------------------------

/** helm's merge of user values over values.yaml: maps merge key by key, anything else replaces, null deletes. */
export function coalesceValues(base: Value, over: Value): Value {
  if (!isMap(base) || !isMap(over)) return over === undefined ? structuredClone(base) : structuredClone(over);
  const out: Record<string, Value> = structuredClone(base);
  for (const [key, value] of Object.entries(over)) {
    if (value === null) delete out[key];
    else out[key] = coalesceValues(out[key], value);
  }
  return out;
}

export interface Rendered {
  readonly values: Record<string, Value>;
  /** Template file name → its output (empty for a disabled resource). */
  readonly outputs: Map<string, string>;
  /** Every Kubernetes object of the manifests (NOTES.txt left out), parsed. */
  readonly objects: Record<string, any>[];
  find(kind: string): Record<string, any>;
  /** The output of a named template of the chart, e.g. tm-cache.container. */
  include(name: string): string;
}

export function renderChart(dir: string, overrides: readonly Value[] = [], release = { Name: 'rel', Namespace: 'ns' }): Rendered {
  const chartYaml = parseYaml(readFileSync(join(dir, 'Chart.yaml'), 'utf8')) as { name: string; version: string; appVersion: string };
  const defaults = parseYaml(readFileSync(join(dir, 'values.yaml'), 'utf8')) as Record<string, Value>;
  const values = overrides.reduce((v, o) => coalesceValues(v, o), defaults) as Record<string, Value>;
  const renderer = new Renderer(loadChart(dir), {
    Values: values,
    Release: { ...release, Service: 'Helm' },
    Chart: { Name: chartYaml.name, Version: chartYaml.version, AppVersion: chartYaml.appVersion },
    Template: { BasePath: `${chartYaml.name}/templates` },
    Files: chartFiles(dir),
  });
  const outputs = renderer.renderAll();
  const objects = [...outputs]
    .filter(([name]) => name.endsWith('.yaml'))
    .flatMap(([name, text]) => text.split(/^---$/m).map((doc) => ({ name, doc: parseYaml(doc) as Record<string, any> | null })))
    .filter((o) => o.doc !== null)
    .map((o) => o.doc!);
  return {
    values,
    outputs,
    objects,
    include: (name) => renderer.include(name),
    find: (kind) => {
      const found = objects.filter((o) => o['kind'] === kind);
      if (found.length !== 1) throw new Error(`${found.length} objects of kind ${kind}`);
      return found[0]!;
    },
  };
}

/** Renders one template text (no chart files) with the given values: for the renderer's own tests. */
export function renderText(text: string, values: Record<string, Value>): string {
  const defines = new Map<string, Node[]>();
  const nodes = parseTemplate(text, defines);
  const chart: Chart = { dir: '', defines, templates: new Map([['t.yaml', nodes]]) };
  return new Renderer(chart, {
    Values: values,
    Release: { Name: 'rel', Namespace: 'ns', Service: 'Helm' },
    Chart: { Name: 'c', Version: '0', AppVersion: '0' },
    Template: { BasePath: 'c/templates' },
    Files: { Get: () => '' },
  }).render('t.yaml');
}
