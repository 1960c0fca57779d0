/**
 * What the bench prints and saves: one table per scenario, then every ratio against its target.
 * Targets are informative (PASS/FAIL labels); the bench exits 0 unless something broke.
 */
export type Cell = string | number | undefined;

export function fmt(value: number | undefined, digits = 2): string {
  if (value === undefined || Number.isNaN(value)) return '—';
  return value.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

/** `alignLeft`: every column left-aligned (figure/value tables whose values are sentences). */
export function printTable(
  title: string,
  header: readonly string[],
  rows: readonly (readonly Cell[])[],
  notes: readonly string[] = [],
  alignLeft = false,
): void {
  const text = rows.map((row) => row.map((c) => (c === undefined ? '—' : String(c))));
  const widths = header.map((h, i) => Math.max(h.length, ...text.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((c, i) => (i === 0 || alignLeft ? c.padEnd(widths[i]!) : c.padStart(widths[i]!)))
      .join('  ')
      .trimEnd();
  console.log(`\n== ${title}`);
  console.log(line(header));
  console.log(widths.map((w) => '-'.repeat(w)).join('  '));
  for (const row of text) console.log(line(row));
  for (const note of notes) console.log(`   ${note}`);
}

export interface Check {
  readonly name: string;
  /** The measured figure, e.g. 0.91 (a ratio) or 0.42 (ms). */
  readonly value: number | undefined;
  /** What it is compared with, as text: "≥ 0.85", "< 1 ms". */
  readonly target: string;
  /** undefined: informative only (no target). */
  readonly pass: boolean | undefined;
  readonly unit?: string;
}

export function ratioCheck(name: string, value: number | undefined, min: number | undefined): Check {
  return {
    name,
    value,
    target: min === undefined ? 'info' : `≥ ${min}`,
    pass: min === undefined || value === undefined ? undefined : value >= min,
  };
}

/** A figure that must stay at or under `max` (a cost ratio: CPU, latency). */
export function maxCheck(name: string, value: number | undefined, max: number): Check {
  return { name, value, target: `≤ ${max}`, pass: value === undefined ? undefined : value <= max };
}

/** A check's figure as the summary prints it (and the README's generated table shows it). */
export function formatValue(c: Check): string {
  // From JSON a missing figure is absent (undefined) or null (NaN). A few µs keep their hundredths:
  // a figure beside a target of 2 µs must not read 2 when it is 2.4.
  if (typeof c.value !== 'number') return 'skipped';
  return `${Number.isInteger(c.value) ? String(c.value) : fmt(c.value, c.unit === 'µs' ? (Math.abs(c.value) < 10 ? 2 : 0) : c.unit ? 3 : 2)}${c.unit ? ` ${c.unit}` : ''}`;
}

export function verdict(c: Check): 'PASS' | 'FAIL' | 'info' | 'SKIP' {
  if (typeof c.pass !== 'boolean') return typeof c.value !== 'number' ? 'SKIP' : 'info';
  return c.pass ? 'PASS' : 'FAIL';
}

export function printSummary(checks: readonly Check[]): void {
  printTable(
    'Summary (ratios and counts measured in this run; targets as each scenario states them)',
    ['figure', 'value', 'target', 'verdict'],
    checks.map((c) => [c.name, formatValue(c), c.target, verdict(c)]),
  );
}

export function median(values: readonly number[]): number {
  return quantile(values, 0.5);
}

/** Nearest-rank-interpolated quantile of `values` (q in 0..1). */
export function quantile(values: readonly number[], q: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const pos = (sorted.length - 1) * q;
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (pos - lo);
}

/** Rows whose rounds differ by more than `limit` (max−min over median): their ratios are unreliable. */
export function noisyRows(rows: readonly { name: string; roundRps?: number[] }[], limit = 0.2): string[] {
  return rows
    .filter((r) => r.roundRps && r.roundRps.length > 1 && (Math.max(...r.roundRps) - Math.min(...r.roundRps)) / median(r.roundRps) > limit)
    .map((r) => r.name);
}

export function noiseNote(names: readonly string[]): string[] {
  return names.length === 0
    ? []
    : [`NOISY: rounds of ${names.join(', ')} differ by > 20% (another process on the cores?): treat their ratios with care, or re-run.`];
}
