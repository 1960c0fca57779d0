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

/** A line's fields, as `logger.info` gets them from a logger without a reachable destination. */
interface AccessFields {
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
  /**
   * Requests' fields, column by column: kept aside until the sink drains them (a batching
   * destination), else one line's, formatted at once.
   */
  readonly #batch: Batch;

  constructor(logger: Logger) {
    this.#logger = logger;
    const symbols = pino.symbols as unknown as Record<string, symbol>;
    const target = logger as unknown as Record<symbol, unknown>;
    const stream = target[symbols['streamSym']!] as Destination | undefined;
    const bindings = target[symbols['chindingsSym']!];
    // Only pino's plain JSON format (no formatters, no custom message key) is written directly.
    this.#stream = typeof stream?.write === 'function' && typeof bindings === 'string' ? stream : undefined;
    this.#bindings = typeof bindings === 'string' ? bindings : '';
    const sink = this.#stream !== undefined && isBatching(this.#stream) ? this.#stream : undefined;
    this.#batch = new Batch(sink === undefined ? 1 : BATCH_LINES, sink);
    sink?.produceFrom(this);
  }

  /** False while the logger is above info (warn, error, silent...): nothing to build. */
  get enabled(): boolean {
    return this.#logger.isLevelEnabled('info');
  }

  /**
   * A request's line, from its fields as values (no object): `target` is the request target (its
   * query is cut here, never logged), `ms` and `upstreamMs` unrounded. With a batching destination
   * the values wait in columns and the line is formatted when the sink drains them; else now.
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
    aborted: boolean,
    refused: string | undefined,
    client: string | undefined,
    userAgent: string | undefined,
    time: number,
  ): void {
    const stream = this.#stream;
    if (stream === undefined) {
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
        aborted: aborted || undefined,
        refused,
        client,
        userAgent: userAgent === undefined ? undefined : cut(userAgent),
      };
      this.#logger.info(fields, 'access');
      return;
    }
    const b = this.#batch;
    const i = b.n++;
    b.reqId[i] = reqId;
    b.method[i] = method;
    b.op[i] = op;
    b.target[i] = target;
    b.status[i] = status;
    b.ms[i] = ms;
    b.outcome[i] = outcome;
    b.tier[i] = tier;
    b.scope[i] = scope;
    b.detail[i] = detail;
    b.upstreamStatus[i] = upstreamStatus ?? -1;
    b.upstreamMs[i] = upstreamMs ?? NaN;
    b.user[i] = user ?? -1;
    b.bytes[i] = bytes ?? -1;
    b.aborted[i] = aborted ? 1 : 0;
    b.refused[i] = refused;
    b.client[i] = client;
    b.userAgent[i] = userAgent;
    b.time[i] = time;
    const sink = b.sink;
    if (sink === undefined) {
      b.n = 0;
      stream.write(this.#format(0));
    } else if (i === 0) sink.wake();
    else if (b.n === BATCH_LINES) sink.absorb();
  }

  /** LineProducer: lines kept aside? */
  pending(): boolean {
    return this.#batch.n > 0;
  }

  /** LineProducer: the lines kept aside, formatted, in order. */
  drain(append: (line: string) => void): void {
    const n = this.#batch.n;
    this.#batch.n = 0;
    for (let i = 0; i < n; i++) append(this.#format(i));
  }

  /** The line of the request in slot `i` of the columns. */
  #format(i: number): string {
    const b = this.#batch;
    const time = b.time[i]!;
    if (time !== this.#time) {
      this.#time = time;
      this.#head = `{"level":30,"time":${time}${this.#bindings},"reqId":`;
    }
    // Not escaped, as they cannot need it: the method is one node's HTTP parser knows (a token of
    // capitals), the operation a catalogue name, the outcome, tier and scope names of this code,
    // the client address the kernel's. Whatever a client chose (request id, path, User-Agent,
    // refused parameters) is escaped.
    let line = `${this.#head}${str(b.reqId[i]!)},"method":"${b.method[i]!}","op":"${b.op[i]!}","path":${str(pathOf(b.target[i]!))},"status":${b.status[i]!},"ms":${round(b.ms[i]!)},"outcome":"${b.outcome[i]!}"`;
    const tier = b.tier[i];
    if (tier !== undefined) line += `,"tier":"${tier}"`;
    const scope = b.scope[i];
    if (scope !== undefined) line += `,"scope":"${scope}"`;
    const detail = b.detail[i];
    if (detail !== undefined) line += `,"detail":${str(detail)}`;
    const upstreamStatus = b.upstreamStatus[i]!;
    if (upstreamStatus >= 0) line += `,"upstreamStatus":${upstreamStatus}`;
    const upstreamMs = b.upstreamMs[i]!;
    if (!Number.isNaN(upstreamMs)) line += `,"upstreamMs":${round(upstreamMs)}`;
    const user = b.user[i]!;
    if (user >= 0) line += `,"user":${user}`;
    const bytes = b.bytes[i]!;
    if (bytes >= 0) line += `,"bytes":${bytes}`;
    if (b.aborted[i] === 1) line += ',"aborted":true';
    const refused = b.refused[i];
    if (refused !== undefined) line += `,"refused":${str(refused)}`;
    const client = b.client[i];
    if (client !== undefined) line += `,"client":"${client}"`;
    const userAgent = b.userAgent[i];
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

/** The columns of the requests' fields: strings as references, numbers unboxed (-1 or NaN: absent). */
class Batch {
  n = 0;
  readonly reqId: string[];
  readonly method: string[];
  readonly op: string[];
  readonly target: string[];
  readonly outcome: string[];
  readonly tier: (string | undefined)[];
  readonly scope: (string | undefined)[];
  readonly detail: (string | undefined)[];
  readonly refused: (string | undefined)[];
  readonly client: (string | undefined)[];
  readonly userAgent: (string | undefined)[];
  readonly status: Int32Array;
  readonly upstreamStatus: Int32Array;
  readonly user: Float64Array;
  readonly bytes: Float64Array;
  readonly aborted: Uint8Array;
  readonly ms: Float64Array;
  readonly upstreamMs: Float64Array;
  readonly time: Float64Array;

  constructor(
    size: number,
    /** The batching destination that drains them; none: each line is formatted at once. */
    readonly sink: BatchingDestination | undefined,
  ) {
    const strings = (): string[] => new Array<string>(size).fill('');
    const maybe = (): (string | undefined)[] => new Array<string | undefined>(size).fill(undefined);
    this.reqId = strings();
    this.method = strings();
    this.op = strings();
    this.target = strings();
    this.outcome = strings();
    this.tier = maybe();
    this.scope = maybe();
    this.detail = maybe();
    this.refused = maybe();
    this.client = maybe();
    this.userAgent = maybe();
    this.status = new Int32Array(size);
    this.upstreamStatus = new Int32Array(size);
    this.user = new Float64Array(size);
    this.bytes = new Float64Array(size);
    this.aborted = new Uint8Array(size);
    this.ms = new Float64Array(size);
    this.upstreamMs = new Float64Array(size);
    this.time = new Float64Array(size);
  }
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
