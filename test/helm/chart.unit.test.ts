/**
 * Static checks of the Helm chart (render.test.ts renders it). No helm binary is available here:
 * Chart.yaml and values.yaml parse, every `.Values.x.y` a template reads exists in values.yaml
 * and in values.schema.json,
 * every template's actions and blocks are balanced, and every `include` names a `define`.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { CONFIG_FILE_ENV, CONFIG_OVERRIDES } from '../../src/config/load.js';
import { keysWithoutComment } from '../helpers/yaml-comments.js';
import { actionEnd } from './render.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const CHART = join(ROOT, 'helm/tm-cache');
const TEMPLATES = join(CHART, 'templates');

const read = (path: string) => readFileSync(path, 'utf8');
const chart = parseYaml(read(join(CHART, 'Chart.yaml'))) as Record<string, unknown>;
const valuesText = read(join(CHART, 'values.yaml'));
const values = parseYaml(valuesText) as Record<string, unknown>;
const schema = JSON.parse(read(join(CHART, 'values.schema.json'))) as SchemaNode;
const templates = readdirSync(TEMPLATES)
  .filter((name) => /\.(yaml|tpl|txt)$/.test(name))
  .sort()
  .map((name) => ({ name, text: read(join(TEMPLATES, name)) }));

interface Action {
  /** The text between `{{` and `}}`, trim markers and spaces removed. */
  readonly body: string;
  readonly line: number;
}

/** The actions of a template in order; throws on a `{{` without its `}}` or a stray `}}` (quoted braces are text). */
function actionsOf(text: string): Action[] {
  const actions: Action[] = [];
  let at = 0;
  for (;;) {
    const open = text.indexOf('{{', at);
    const strayClose = text.indexOf('}}', at);
    if (open === -1) {
      if (strayClose !== -1) throw new Error(`"}}" without "{{" at line ${lineAt(text, strayClose)}`);
      return actions;
    }
    if (strayClose !== -1 && strayClose < open) throw new Error(`"}}" without "{{" at line ${lineAt(text, strayClose)}`);
    const close = actionEnd(text, open + 2);
    const inside = close === -1 ? '' : text.slice(open + 2, close).replace(/"(?:[^"\\]|\\.)*"|`[^`]*`/g, '""');
    if (close === -1 || inside.includes('{{')) throw new Error(`"{{" without "}}" at line ${lineAt(text, open)}`);
    const body = text
      .slice(open + 2, close)
      .replace(/^-\s?/, '')
      .replace(/\s?-$/, '')
      .trim();
    actions.push({ body, line: lineAt(text, open) });
    at = close + 2;
  }
}

function lineAt(text: string, offset: number): number {
  return text.slice(0, offset).split('\n').length;
}

const isComment = (action: Action) => action.body.startsWith('/*');

/** Problems with if/range/with/define/block … else … end nesting and parentheses. */
function blockProblems(actions: readonly Action[]): string[] {
  const problems: string[] = [];
  const open: Action[] = [];
  for (const action of actions) {
    if (isComment(action)) {
      if (!action.body.endsWith('*/')) problems.push(`line ${action.line}: comment not closed with */`);
      continue;
    }
    const withoutStrings = action.body.replace(/"(?:[^"\\]|\\.)*"|`[^`]*`/g, '""');
    const depth = [...withoutStrings].reduce((d, c) => (d < 0 ? d : d + (c === '(' ? 1 : c === ')' ? -1 : 0)), 0);
    if (depth !== 0) problems.push(`line ${action.line}: unbalanced parentheses in {{ ${action.body} }}`);
    const keyword = /^(\w+)/.exec(action.body)?.[1];
    if (keyword === 'if' || keyword === 'range' || keyword === 'with' || keyword === 'define' || keyword === 'block') {
      open.push(action);
    } else if (keyword === 'else') {
      const top = open.at(-1);
      if (top === undefined || !/^(if|range|with)\b/.test(top.body)) problems.push(`line ${action.line}: else outside if/range/with`);
    } else if (keyword === 'end') {
      if (open.pop() === undefined) problems.push(`line ${action.line}: end without an open block`);
    }
  }
  for (const action of open) problems.push(`line ${action.line}: {{ ${action.body} }} has no end`);
  return problems;
}

/** `.Values.a.b` and `$.Values.a.b` references, as `a.b`. */
function valuesReferences(text: string): string[] {
  return [...text.matchAll(/\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)/g)].map((m) => m[1]!.slice(1));
}

interface SchemaNode {
  properties?: Record<string, SchemaNode>;
  $ref?: string;
  definitions?: Record<string, SchemaNode>;
}

/** Whether values.schema.json declares a dotted path by name (following $ref to its definitions). */
function schemaHasPath(path: string): boolean {
  let node: SchemaNode | undefined = schema;
  for (const key of path.split('.')) {
    while (node?.$ref !== undefined) node = schema.definitions?.[node.$ref.replace('#/definitions/', '')];
    node = node?.properties?.[key];
    if (node === undefined) return false;
  }
  return true;
}

function hasPath(tree: unknown, path: string): boolean {
  let node = tree;
  for (const key of path.split('.')) {
    if (typeof node !== 'object' || node === null || Array.isArray(node) || !Object.hasOwn(node, key)) return false;
    node = (node as Record<string, unknown>)[key];
  }
  return true;
}

describe('Chart.yaml', () => {
  it('describes a v2 application chart named tm-cache with a semver version', () => {
    expect(chart).toMatchObject({ apiVersion: 'v2', name: 'tm-cache', type: 'application' });
    expect(chart['version']).toMatch(/^\d+\.\d+\.\d+(-[\w.]+)?$/);
  });

  it('deploys the version of package.json by default', () => {
    const pkg = JSON.parse(read(join(ROOT, 'package.json'))) as { version: string };
    expect(chart['appVersion']).toBe(pkg.version);
  });
});

describe('values.yaml', () => {
  it('parses to a mapping', () => {
    expect(values).toBeTypeOf('object');
    expect(values).not.toBeNull();
  });

  it('has a comment for every value', () => {
    expect(keysWithoutComment(valuesText)).toEqual([]);
  });
});

describe('templates', () => {
  it('include the expected resources', () => {
    expect(templates.map((t) => t.name)).toEqual(
      expect.arrayContaining([
        'NOTES.txt',
        '_helpers.tpl',
        'configmap.yaml',
        'dashboard.yaml',
        'deployment.yaml',
        'hpa.yaml',
        'management-service.yaml',
        'networkpolicy.yaml',
        'pdb.yaml',
        'podmonitor.yaml',
        'prometheusrule.yaml',
        'secret.yaml',
        'service.yaml',
        'serviceaccount.yaml',
        'servicemonitor.yaml',
      ]),
    );
  });

  it.each(templates)('$name has balanced {{ }}, blocks and parentheses', ({ text }) => {
    expect(blockProblems(actionsOf(text))).toEqual([]);
  });

  it.each(templates)('$name reads only values that values.yaml defines', ({ text }) => {
    const missing = valuesReferences(text).filter((path) => !hasPath(values, path));
    expect(missing).toEqual([]);
  });

  it.each(templates)('$name reads only values that values.schema.json declares', ({ text }) => {
    expect(valuesReferences(text).filter((path) => !schemaHasPath(path))).toEqual([]);
  });

  it('include only templates that _helpers.tpl defines', () => {
    const helpers = templates.find((t) => t.name === '_helpers.tpl')!.text;
    const defined = new Set([...helpers.matchAll(/define\s+"([^"]+)"/g)].map((m) => m[1]));
    const included = templates.flatMap((t) => [...t.text.matchAll(/include\s+"([^"]+)"/g)].map((m) => m[1]));
    expect(included.length).toBeGreaterThan(0);
    expect(included.filter((name) => !defined.has(name))).toEqual([]);
  });

  it('set only environment variables that tm-cache reads', () => {
    const known = new Set([CONFIG_FILE_ENV, ...CONFIG_OVERRIDES.flatMap((o) => (o.env === undefined ? [] : [o.env]))]);
    const used = templates.flatMap((t) => [...t.text.matchAll(/\b(TM_CACHE_[A-Z_]+)/g)].map((m) => m[1]!));
    expect(used.length).toBeGreaterThan(0);
    expect(used.filter((name) => !known.has(name))).toEqual([]);
  });

  it('pass the mounted ConfigMap with --config', () => {
    const container = templates.find((t) => t.name === '_helpers.tpl')!.text;
    expect(container).toContain('args: ["serve", "--config", "/etc/tm-cache/config.yaml"]');
    expect(container).toMatch(/- name: tm-cache-config\s+mountPath: \/etc\/tm-cache\b/);
    expect(templates.find((t) => t.name === 'configmap.yaml')!.text).toContain('config.yaml: |');
  });
});

describe('the checks themselves', () => {
  it.each([
    ['{{ if .x }}a', 'has no end'],
    ['a{{ end }}', 'end without an open block'],
    ['{{ else }}', 'else outside'],
    ['{{ include "x" (dict "a" 1 }}', 'unbalanced parentheses'],
  ])('find the problem in %j', (text, problem) => {
    expect(blockProblems(actionsOf(text)).join('\n')).toContain(problem);
  });

  it.each(['{{ .Values.a ', 'a }} b', '{{ .a {{ .b }}', '{{ "}}" '])('refuse unbalanced braces in %j', (text) => {
    expect(() => actionsOf(text)).toThrow(/without/);
  });

  it('read quoted braces as text', () => {
    expect(actionsOf('{{ "{{" }} $value {{ "}}" }}').map((a) => a.body)).toEqual(['"{{"', '"}}"']);
  });

  it('find a .Values reference that values.yaml lacks', () => {
    expect(valuesReferences('{{ .Values.image.tagg }} {{ $.Values.service.port }}')).toEqual(['image.tagg', 'service.port']);
    expect(hasPath(values, 'image.tagg')).toBe(false);
    expect(hasPath(values, 'service.port')).toBe(true);
    expect(schemaHasPath('image.tagg')).toBe(false);
    expect(schemaHasPath('service.port')).toBe(true);
    expect(schemaHasPath('podSecurityContext.seccompProfile.type')).toBe(true);
  });
});
