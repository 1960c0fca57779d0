/** Reads one gauge of a running tm-cache from its management port (`/metrics`, Prometheus text). */
export async function readGauge(managementUrl: string, name: string): Promise<number> {
  const text = await (await fetch(`${managementUrl}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  if (line === undefined) throw new Error(`no gauge ${name} in ${managementUrl}/metrics`);
  return Number(line.slice(name.length + 1));
}
