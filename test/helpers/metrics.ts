/** Reads one gauge of a running tm-cache from its management port (`/metrics`, Prometheus text). */
export async function readGauge(managementUrl: string, name: string): Promise<number> {
  const text = await (await fetch(`${managementUrl}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  if (line === undefined) throw new Error(`no gauge ${name} in ${managementUrl}/metrics`);
  return Number(line.slice(name.length + 1));
}

/** Prometheus' own series, which no exporter prints. */
export const SCRAPE_SERIES = new Set(['up']);
const KEYWORDS = new Set(['and', 'or', 'unless', 'bool', 'offset', 'inf', 'nan']);

/** The metric names a PromQL expression (or a Grafana label_values query) reads. */
export function metricNames(expr: string): string[] {
  const stripped = expr
    .replace(/label_values\(\s*([A-Za-z_:][\w:]*)\s*(\{[^}]*\})?\s*,\s*\w+\s*\)/g, ' $1 ')
    .replace(/"(?:[^"\\]|\\.)*"/g, ' ')
    .replace(/\{[^}]*\}/g, ' ')
    .replace(/\[[^\]]*\]/g, ' ')
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ')
    .replace(/\$\{?\w+\}?/g, ' ')
    .replace(/\b\d+(\.\d+)?(e[+-]?\d+)?\b/gi, ' ');
  const names = [...stripped.matchAll(/([A-Za-z_:][\w:]*)(\s*\()?/g)].filter((m) => m[2] === undefined && !KEYWORDS.has(m[1]!.toLowerCase())).map((m) => m[1]!);
  return [...new Set(names)];
}
