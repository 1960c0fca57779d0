/**
 * The access log line, written straight to the logger's destination in pino's own format
 * (`{"level":30,"time":…,"pid":…,"hostname":…, fields…, "msg":"access"}`), so that log
 * processors see one format. Built by hand because it is written for every request, hits
 * included: pino's generic serializer costs several microseconds per line, more than the rest
 * of a memory hit's bookkeeping; a line built from known fields costs a fraction of that.
 * Strings from the request (path, request id) are escaped as JSON; absent fields are left out.
 * `tm-cache serve` writes through a LogSink (log-sink.ts), where a line costs a copy into a buffer.
 *
 * There, a request's line is not even formatted on its path: its fields (strings it already has,
 * numbers) are kept in columns, and the lines are formatted in batches when the sink is about to
 * write (at most `maxDelayMs` later) or the columns are full. Formatting a line while the request's
 * own work has the caches measured several times what a batch costs per line (the same code, hot).
 * Access lines may then follow, by a few milliseconds, a warning logged after them; each carries
 * its own time.
 *
 * A logger without a reachable destination (a custom one) gets the same fields through
 * `logger.info`.
 */
import { pino, type Logger } from 'pino';
import type { LineProducer } from './log-sink.js';

export interface AccessFields {
  readonly reqId: string;
  readonly method: string;
  readonly op: string;
  readonly path: string;
  readonly status: number;
  readonly ms: number;
  readonly outcome: string;
  readonly tier?: string | undefined;
  /** Whose entry answered (decided requests): `user`, `admin` or `project` (`cache.sharing: project`), never an id. */
  readonly scope?: string | undefined;
  readonly detail?: string | undefined;
  readonly upstreamStatus?: number | undefined;
  readonly upstreamMs?: number | undefined;
  readonly user?: number | undefined;
  readonly bytes?: number | undefined;
  readonly aborted?: boolean | undefined;
  /** The address the request came from (the socket's peer: a load balancer's, behind one). */
  readonly client?: string | undefined;
  /** The client's User-Agent, as sent (escaped; cut to `MAX_USER_AGENT_CHARS`). */
  readonly userAgent?: string | undefined;
  /** The parameters a 400/422 refused, comma-separated, as its body's `errors` names them. */
  readonly refused?: string | undefined;
}

/** A User-Agent longer than this is cut: a line per request must not carry a client's essay. */
const MAX_USER_AGENT_CHARS = 256;

interface Destination {
  write(line: string): unknown;
}

/** A destination that takes lines kept aside (LogSink). */
interface BatchingDestination extends Destination {
  produceFrom(producer: LineProducer): void;
  absorb(): void;
  wake(): void;
}

/** Request lines kept aside before they are formatted: at most this many (then formatted at once). */
const BATCH_LINES = 128;

/** Characters that need no escaping inside a JSON string: printable ASCII but `"` and `\`. */
const PLAIN = /^[\x20\x21\x23-\x5b\x5d-\x7e]*$/;

const str = (s: string): string => (PLAIN.test(s) ? `"${s}"` : JSON.stringify(s));

export class AccessLog implements LineProducer {
  readonly #logger: Logger;
  readonly #stream: Destination | undefined;
  readonly #bindings: string;
  /** The line's start up to the request id, for the millisecond `#time`: lines of one millisecond share it. */
  #time = -1;
  #head = '';
  /** The last User-Agent seen and its JSON (cut, escaped): a client sends the same one on every request. */
  #userAgent = '';
  #userAgentJson = '""';
  /** Requests' fields kept aside (a batching destination), column by column. */
  readonly #batch: Batch | undefined;

  constructor(logger: Logger) {
    this.#logger = logger;
    const symbols = pino.symbols as unknown as Record<string, symbol>;
    const target = logger as unknown as Record<symbol, unknown>;
    const stream = target[symbols['streamSym']!] as Destination | undefined;
    const bindings = target[symbols['chindingsSym']!];
    // Only pino's plain JSON format (no formatters, no custom message key) is written directly.
    this.#stream = typeof stream?.write === 'function' && typeof bindings === 'string' ? stream : undefined;
    this.#bindings = typeof bindings === 'string' ? bindings : '';
    if (this.#stream !== undefined && isBatching(this.#stream)) {
      this.#batch = new Batch(this.#stream);
      this.#stream.produceFrom(this);
    }
  }

  /** False while the logger is above info (warn, error, silent...): nothing to build. */
  get enabled(): boolean {
    return this.#logger.isLevelEnabled('info');
  }

  /** A line from its fields, formatted now (or kept aside, as `request` does, with a batching destination). */
  write(f: AccessFields, time: number): void {
    if (this.#stream === undefined) {
      this.#logger.info({ ...f, userAgent: f.userAgent === undefined ? undefined : cut(f.userAgent) }, 'access');
      return;
    }
    this.request(
      f.reqId,
      f.method,
      f.op,
      f.path,
      f.status,
      f.ms,
      f.outcome,
      f.tier,
      f.scope,
      f.detail,
      f.upstreamStatus,
      f.upstreamMs,
      f.user,
      f.bytes,
      f.aborted,
      f.refused,
      f.client,
      f.userAgent,
      time,
    );
  }

  /**
   * A request's line, from its fields as values: `target` is the request target (its query is
   * cut here, never logged), `ms` and `upstreamMs` unrounded. With a batching destination the
   * values are stored in columns (no object, no string built); else the line is written now.
   */
  request(
    reqId: string,
    method: string,
    op: string,
    target: string,
    status: number,
    ms: number,
    outcome: string,
    tier: string | undefined,
    scope: string | undefined,
    detail: string | undefined,
    upstreamStatus: number | undefined,
    upstreamMs: number | undefined,
    user: number | undefined,
    bytes: number | undefined,
    aborted: boolean | undefined,
    refused: string | undefined,
    client: string | undefined,
    userAgent: string | undefined,
    time: number,
  ): void {
    const batch = this.#batch;
    if (batch === undefined) {
      if (this.#stream === undefined) {
        const fields: AccessFields = {
          reqId,
          method,
          op,
          path: pathOf(target),
          status,
          ms: round(ms),
          outcome,
          tier,
          scope,
          detail,
          upstreamStatus,
          upstreamMs: upstreamMs === undefined ? undefined : round(upstreamMs),
          user,
          bytes,
          aborted,
          refused,
          client,
          userAgent,
        };
        this.write(fields, time);
        return;
      }
      this.#stream.write(
        this.#format(
          reqId,
          method,
          op,
          target,
          status,
          ms,
          outcome,
          tier,
          scope,
          detail,
          upstreamStatus,
          upstreamMs,
          user,
          bytes,
          aborted,
          refused,
          client,
          userAgent,
          time,
        ),
      );
      return;
    }
    const i = batch.n++;
    batch.reqId[i] = reqId;
    batch.method[i] = method;
    batch.op[i] = op;
    batch.target[i] = target;
    batch.status[i] = status;
    batch.ms[i] = ms;
    batch.outcome[i] = outcome;
    batch.tier[i] = tier;
    batch.scope[i] = scope;
    batch.detail[i] = detail;
    batch.upstreamStatus[i] = upstreamStatus ?? -1;
    batch.upstreamMs[i] = upstreamMs ?? NaN;
    batch.user[i] = user ?? -1;
    batch.bytes[i] = bytes ?? -1;
    batch.aborted[i] = aborted === true ? 1 : 0;
    batch.refused[i] = refused;
    batch.client[i] = client;
    batch.userAgent[i] = userAgent;
    batch.time[i] = time;
    if (i === 0) batch.sink.wake();
    else if (batch.n === BATCH_LINES) batch.sink.absorb();
  }

  /** LineProducer: lines kept aside? */
  pending(): boolean {
    return this.#batch !== undefined && this.#batch.n > 0;
  }

  /** LineProducer: the lines kept aside, formatted, in order. */
  drain(append: (line: string) => void): void {
    const b = this.#batch;
    if (b === undefined) return;
    const n = b.n;
    b.n = 0;
    for (let i = 0; i < n; i++) {
      const upstreamStatus = b.upstreamStatus[i]!;
      const upstreamMs = b.upstreamMs[i]!;
      const user = b.user[i]!;
      const bytes = b.bytes[i]!;
      append(
        this.#format(
          b.reqId[i]!,
          b.method[i]!,
          b.op[i]!,
          b.target[i]!,
          b.status[i]!,
          b.ms[i]!,
          b.outcome[i]!,
          b.tier[i],
          b.scope[i],
          b.detail[i],
          upstreamStatus < 0 ? undefined : upstreamStatus,
          Number.isNaN(upstreamMs) ? undefined : upstreamMs,
          user < 0 ? undefined : user,
          bytes < 0 ? undefined : bytes,
          b.aborted[i] === 1,
          b.refused[i],
          b.client[i],
          b.userAgent[i],
          b.time[i]!,
        ),
      );
    }
  }

  #format(
    reqId: string,
    method: string,
    op: string,
    target: string,
    status: number,
    ms: number,
    outcome: string,
    tier: string | undefined,
    scope: string | undefined,
    detail: string | undefined,
    upstreamStatus: number | undefined,
    upstreamMs: number | undefined,
    user: number | undefined,
    bytes: number | undefined,
    aborted: boolean | undefined,
    refused: string | undefined,
    client: string | undefined,
    userAgent: string | undefined,
    time: number,
  ): string {
    if (time !== this.#time) {
      this.#time = time;
      this.#head = `{"level":30,"time":${time}${this.#bindings},"reqId":`;
    }
    // Not escaped, as they cannot need it: the method is one node's HTTP parser knows (a token of
    // capitals), the operation a catalogue name, the outcome, tier and scope names of this code,
    // the client address the kernel's. Whatever a client chose (request id, path, User-Agent,
    // refused parameters) is escaped.
    let line = `${this.#head}${str(reqId)},"method":"${method}","op":"${op}","path":${str(pathOf(target))},"status":${status},"ms":${round(ms)},"outcome":"${outcome}"`;
    if (tier !== undefined) line += `,"tier":"${tier}"`;
    if (scope !== undefined) line += `,"scope":"${scope}"`;
    if (detail !== undefined) line += `,"detail":${str(detail)}`;
    if (upstreamStatus !== undefined) line += `,"upstreamStatus":${upstreamStatus}`;
    if (upstreamMs !== undefined) line += `,"upstreamMs":${round(upstreamMs)}`;
    if (user !== undefined) line += `,"user":${user}`;
    if (bytes !== undefined) line += `,"bytes":${bytes}`;
    if (aborted) line += ',"aborted":true';
    if (refused !== undefined) line += `,"refused":${str(refused)}`;
    if (client !== undefined) line += `,"client":"${client}"`;
    if (userAgent !== undefined) {
      if (userAgent !== this.#userAgent) {
        this.#userAgent = userAgent;
        this.#userAgentJson = str(cut(userAgent));
      }
      line += `,"userAgent":${this.#userAgentJson}`;
    }
    return `${line},"msg":"access"}\n`;
  }
}

/** The columns of the lines kept aside: strings as references, numbers unboxed (-1 or NaN: absent). */
class Batch {
  n = 0;
  readonly reqId: string[] = new Array<string>(BATCH_LINES).fill('');
  readonly method: string[] = new Array<string>(BATCH_LINES).fill('');
  readonly op: string[] = new Array<string>(BATCH_LINES).fill('');
  readonly target: string[] = new Array<string>(BATCH_LINES).fill('');
  readonly outcome: string[] = new Array<string>(BATCH_LINES).fill('');
  readonly tier: (string | undefined)[] = new Array<string | undefined>(BATCH_LINES).fill(undefined);
  readonly scope: (string | undefined)[] = new Array<string | undefined>(BATCH_LINES).fill(undefined);
  readonly detail: (string | undefined)[] = new Array<string | undefined>(BATCH_LINES).fill(undefined);
  readonly refused: (string | undefined)[] = new Array<string | undefined>(BATCH_LINES).fill(undefined);
  readonly client: (string | undefined)[] = new Array<string | undefined>(BATCH_LINES).fill(undefined);
  readonly userAgent: (string | undefined)[] = new Array<string | undefined>(BATCH_LINES).fill(undefined);
  readonly status = new Int32Array(BATCH_LINES);
  readonly upstreamStatus = new Int32Array(BATCH_LINES);
  readonly user = new Float64Array(BATCH_LINES);
  readonly bytes = new Float64Array(BATCH_LINES);
  readonly aborted = new Uint8Array(BATCH_LINES);
  readonly ms = new Float64Array(BATCH_LINES);
  readonly upstreamMs = new Float64Array(BATCH_LINES);
  readonly time = new Float64Array(BATCH_LINES);

  constructor(readonly sink: BatchingDestination) {}
}

function isBatching(stream: Destination): stream is BatchingDestination {
  const s = stream as Partial<BatchingDestination>;
  return typeof s.produceFrom === 'function' && typeof s.absorb === 'function' && typeof s.wake === 'function';
}

const round = (ms: number): number => Math.round(ms * 100) / 100;

/** The path of a request target, without its query: queries may carry secrets, logs never do. */
export function pathOf(url: string | undefined): string {
  const u = url ?? '';
  const end = u.search(/[?#]/);
  return end === -1 ? u : u.slice(0, end);
}

const cut = (userAgent: string): string => (userAgent.length > MAX_USER_AGENT_CHARS ? userAgent.slice(0, MAX_USER_AGENT_CHARS) : userAgent);
