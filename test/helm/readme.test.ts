/**
 * The chart's README says what works: every `helm install` command in it renders as written and
 * passes values.schema.json, so does every `# values` block, and its values table names exactly
 * the top-level values of values.yaml.
 */
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Ajv } from 'ajv';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { coalesceValues, renderChart } from './render.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const CHART = join(ROOT, 'helm/tm-cache');
const readme = readFileSync(join(CHART, 'README.md'), 'utf8');
const defaults = parseYaml(readFileSync(join(CHART, 'values.yaml'), 'utf8')) as Record<string, unknown>;
const validate = new Ajv({ strict: true, allErrors: true }).compile(JSON.parse(readFileSync(join(CHART, 'values.schema.json'), 'utf8')) as object);

/** Fenced code blocks of a language, in order. */
const blocks = (lang: string) => [...readme.matchAll(new RegExp('^\\s*```' + lang + '\\n([\\s\\S]*?)^\\s*```', 'gm'))].map((m) => m[1]!.replace(/^ {2}/gm, ''));

/** What the shell would substitute for the README's generated secrets: values of the same shape. */
const SUBSTITUTIONS: [RegExp, string][] = [
  [/\$\(openssl rand -base64 32\)/g, Buffer.alloc(32, 7).toString('base64')],
  [/\$\(openssl rand -hex 24\)/g, 'ab'.repeat(24)],
];

/** helm's --set: `a.b=value`, a value typed as helm types it (true/false, integers, else text). */
function setOverrides(command: string): Record<string, unknown>[] {
  let line = command.replace(/\\\n/g, ' ');
  for (const [pattern, value] of SUBSTITUTIONS) line = line.replace(pattern, value);
  if (line.includes('$')) throw new Error(`unsubstituted shell expansion in: ${line}`);
  return [...line.matchAll(/--set\s+([\w.]+)=(\S+)/g)].map(([, path, raw]) => {
    const value = raw === 'true' ? true : raw === 'false' ? false : /^\d+$/.test(raw!) ? Number(raw) : raw;
    return path!.split('.').reduceRight<Record<string, unknown>>((inner, key) => ({ [key]: inner }), value as never);
  });
}

function problemsOf(overrides: object[]): string[] {
  const values = overrides.reduce<unknown>((v, o) => coalesceValues(v, o), defaults);
  return validate(values) ? [] : (validate.errors ?? []).map((e) => `${e.instancePath}: ${e.message}`);
}

const INSTALLS = blocks('sh').filter((b) => b.startsWith('helm install'));
const VALUES_BLOCKS = blocks('yaml').filter((b) => b.startsWith('# values'));
const REQUIRED = { upstream: { url: 'https://tm.example.com' }, image: { repository: 'registry.example.com/tools/tm-cache' } };

describe('the chart README', () => {
  it('has install commands for a shared deployment, Redis with a generated secret, an existing Secret and a sidecar', () => {
    expect(INSTALLS.length).toBe(4);
    expect(INSTALLS.join('\n')).toMatch(/secret\.hmacSecret=\$\(openssl rand -base64 32\)/);
    expect(INSTALLS.join('\n')).toContain('secret.existingSecret=tm-cache-secrets');
    expect(INSTALLS.join('\n')).toContain('mode=sidecar');
    for (const install of INSTALLS) expect(install).toContain('--set image.repository=');
  });

  it.each(
    INSTALLS.map((command) => [
      command
        .split('\n')
        .slice(1)
        .join(' ')
        .replace(/\s+\\?\s+/g, ' '),
      command,
    ]),
  )('renders `helm install` as written, and the schema accepts it: %s', (_, command) => {
    const overrides = setOverrides(command);
    expect(problemsOf(overrides)).toEqual([]);
    expect(() => renderChart(CHART, overrides)).not.toThrow();
  });

  it.each(VALUES_BLOCKS.map((b) => [b.split('\n')[0]!, b]))("renders the %s block with the schema's approval", (_, block) => {
    const overrides = [REQUIRED, parseYaml(block) as object];
    expect(problemsOf(overrides)).toEqual([]);
    expect(renderChart(CHART, overrides).objects.length).toBeGreaterThan(0);
  });

  it('documents every top-level value of values.yaml in its values table, and no other', () => {
    const table = readme.slice(readme.indexOf('## Values'), readme.indexOf('### What the schema refuses'));
    const documented = [...table.matchAll(/^\| `([A-Za-z]+)` \|/gm)].map((m) => m[1]);
    expect(documented).toEqual(Object.keys(defaults));
  });

  it("states the sizing rule's default as the chart renders it", () => {
    const c = renderChart(CHART, [REQUIRED]).find('Deployment')['spec']['template']['spec']['containers'][0] as { env: { name: string; value?: string }[] };
    const heap = c.env.find((e) => e.name === 'NODE_OPTIONS')!.value!.replace('--max-old-space-size=', '');
    expect(readme).toContain(`| 512Mi (default) | 268435456 (256 MiB, default) | ${heap} MiB |`);
  });
});
