/**
 * `trace`: what tracing costs a memory hit. The same build three times, serving at once in
 * rotating rounds (compareHits): tracing off (the default), on with every request traced
 * (`OTEL_TRACES_SAMPLER` at its default, parent-based always-on), and on with 1 % of traces kept
 * (`traceidratio`, 0.01). Spans go over OTLP/HTTP to a receiver in this runner (a real
 * endpoint: the exporter's batches are parsed and counted, then dropped), at the SDK's default
 * batching (`OTEL_BSP_*` unset): what a hit costs an operator who turns tracing on.
 *
 * Prints req/s and CPU per request of each, CPU per hit on ÷ off, and how many spans reached
 * the receiver against the hits served (the batch processor drops what its queue cannot hold).
 */
import { compareHits, type HitFigures, type LoadOptions, type Page } from './measure.js';
import { fmt, printTable, ratioCheck, type Check } from './report.js';
import { startTmCache, type Emulator, type Server } from './servers.js';
import { startOtlpReceiver } from '../helpers/otlp-receiver.js';

interface TraceRow extends HitFigures {
  /** CPU per request ÷ tracing off's. */
  readonly cpuByOff: number;
}

interface TraceScenario {
  readonly rows: TraceRow[];
  /** Spans the receiver got from both traced servers together. */
  readonly spansReceived: number;
  readonly checks: Check[];
}

export async function runTraceScenario(emulator: Emulator, page: Page, load: LoadOptions): Promise<TraceScenario> {
  const receiver = await startOtlpReceiver({ keep: false });
  const endpoint = { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url };
  const variants: [string, Record<string, string>][] = [
    ['tracing off', {}],
    ['tracing on, every request', endpoint],
    ['tracing on, 1 % kept', { ...endpoint, OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.01' }],
  ];
  const servers: Server[] = [];
  try {
    for (const [name, env] of variants) servers.push(await startTmCache(emulator.url, { name, env }));
    const figures = await compareHits(servers, page, load);
    // Spans of one server cannot be told from another's here: the receiver's count is of all of them.
    for (const s of servers) await s.proc.stop();
    servers.length = 0;
    const off = figures[0]!;
    const rows = figures.map((f) => ({ ...f, cpuByOff: f.cpuUsPerReq / off.cpuUsPerReq }));
    printTable(
      `memory hit with tracing off and on: ${page.path}, ${load.connections} connections, ${load.rounds} rotating rounds`,
      ['tm-cache', 'req/s', 'CPU µs/req', 'CPU per hit ÷ off', 'errors'],
      rows.map((r) => [r.name, fmt(r.rps, 0), fmt(r.cpuUsPerReq, 1), fmt(r.cpuByOff), r.errors]),
      [`spans received by the OTLP receiver, both traced servers together: ${receiver.received.toLocaleString('en-US')} (export batches: ${receiver.posts})`],
    );
    return {
      rows,
      spansReceived: receiver.received,
      checks: rows.slice(1).map((r) => ratioCheck(`trace: CPU per memory hit, ${r.name} ÷ off`, r.cpuByOff, undefined)),
    };
  } finally {
    await Promise.all(servers.map((s) => s.proc.stop()));
    await receiver.close();
  }
}
