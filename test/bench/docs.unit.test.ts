/**
 * The benchmark table of docs/benchmarks.md is rendered from docs/bench/results.json (docs.ts): what the
 * rendering shows, how it is spliced between the markers, and that the README says what the
 * committed JSON renders (so its figures cannot drift from a real run's).
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { BEGIN, DOCS_RESULTS, END, renderFigures, spliceFigures, updateResults, type DocsResults } from './docs.js';
import type { ScenarioRecord } from './results.js';

const ROOT = resolve(import.meta.dirname, '../..');

const record = (scenario: string, extra: Partial<ScenarioRecord> = {}): ScenarioRecord => ({
  scenario,
  startedAt: '2030-01-02T03:04:05.000Z',
  elapsedS: 61.4,
  setup: { node: 'v20.20.2', cores: 2, cpu: 'x', pinned: true, loadAverage: 3.5, short: false, knobs: {} },
  checks: [
    { name: 'hit: tm-cache ÷ bare fastify (req/s)', value: 0.9512, target: '≥ 0.85', pass: true },
    { name: 'miss: median overhead vs emulator', value: 1.2, unit: 'ms', target: '< 1 ms', pass: false },
    { name: 'coalescing: upstream requests for 1000 cold', value: 1, unit: '', target: '= 1', pass: true },
    { name: 'hit: tm-cache ÷ varnish | peer', value: undefined, target: '≥ 1', pass: undefined },
  ],
  ...extra,
});

describe('renderFigures', () => {
  it('gives each scenario its run and a table of its checks, as the summary prints them', () => {
    const text = renderFigures({ scenarios: { hit: record('hit') } });
    expect(text).toContain('**hit** (2030-01-02, full run, 61 s; node v20.20.2, pinned, load average 3.5 on 2 cores: other work shared the machine)');
    expect(text).toContain('| hit: tm-cache ÷ bare fastify (req/s) | 0.95 | ≥ 0.85 | PASS |');
    expect(text).toContain('| miss: median overhead vs emulator | 1.200 ms | < 1 ms | FAIL |');
    expect(text).toContain('| coalescing: upstream requests for 1000 cold | 1 | = 1 | PASS |');
    expect(text).toContain('| hit: tm-cache ÷ varnish \\| peer | skipped | ≥ 1 | SKIP |');
  });

  it('says a short run is one, and a scenario that was not measured is not', () => {
    const short = record('miss', { setup: { ...record('miss').setup, short: true, loadAverage: 0.4 } });
    const text = renderFigures({ scenarios: { miss: short, redis: record('redis', { skipped: 'wrk not found (install: apt-get install wrk)', checks: [] }) } });
    expect(text).toContain('short run (`--short`)');
    expect(text).toContain('load average 0.4 on 2 cores)');
    expect(text).toContain('not measured: wrk not found (install: apt-get install wrk)');
    expect(text.indexOf('**miss**')).toBeLessThan(text.indexOf('**redis**'));
  });
});

describe('spliceFigures', () => {
  it('replaces what is between the markers and nothing else', () => {
    const readme = `# t\n\nbefore\n${BEGIN}\nold table\n${END}\nafter\n`;
    expect(spliceFigures(readme, 'new table\n')).toBe(`# t\n\nbefore\n${BEGIN}\nnew table\n${END}\nafter\n`);
  });

  it('refuses a README without the markers', () => {
    expect(() => spliceFigures('# t\n', 'x')).toThrow(/markers/);
  });
});

describe('updateResults', () => {
  it("takes each scenario's measured result, keeps the committed one where the run failed or skipped it", () => {
    const from = mkdtempSync(join(tmpdir(), 'bench-docs-'));
    writeFileSync(join(from, 'hit.json'), JSON.stringify(record('hit', { startedAt: '2031-01-01T00:00:00.000Z', result: { rows: [] } })));
    writeFileSync(join(from, 'miss.json'), JSON.stringify(record('miss', { error: 'boom', checks: [] })));
    const current: DocsResults = { scenarios: { miss: record('miss'), hit: record('hit') } };
    const { results, taken } = updateResults(current, from, ['hit', 'miss', 'redis']);
    expect(taken).toEqual(['hit']);
    expect(Object.keys(results.scenarios)).toEqual(['hit', 'miss']);
    expect(results.scenarios['hit']!.startedAt).toBe('2031-01-01T00:00:00.000Z');
    expect(results.scenarios['miss']!.error).toBeUndefined();
    expect(results.scenarios['hit']!.checks).toHaveLength(4);
    expect(results.scenarios['hit']!.result).toBeUndefined();
  });
});

describe('the README', () => {
  it(`shows the figures ${DOCS_RESULTS} renders (npm run bench:docs)`, () => {
    const readme = readFileSync(join(ROOT, 'docs', 'benchmarks.md'), 'utf8');
    const results = JSON.parse(readFileSync(join(ROOT, DOCS_RESULTS), 'utf8')) as DocsResults;
    expect(Object.keys(results.scenarios).length).toBeGreaterThan(0);
    expect(readme).toBe(spliceFigures(readme, renderFigures(results)));
  });
});
