/**
 * The access log line, written straight to the logger's destination in pino's own format
 * (`{"level":30,"time":…,"pid":…,"hostname":…, fields…, "msg":"access"}`), so that log
 * processors see one format. Built by hand because it is written for every request, hits
 * included: pino's generic serializer costs several microseconds per line, more than the rest
 * of a memory hit's bookkeeping; a line built from known fields costs a fraction of that.
 * Strings from the request (path, request id) are escaped as JSON; absent fields are left out.
 * `tm-cache serve` writes through a LogSink (log-sink.ts), where a line costs a copy into a buffer.
 *
 * A logger without a reachable destination (a custom one) gets the same fields through
 * `logger.info`.
 */
import { pino, type Logger } from 'pino';

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

/** Characters that need no escaping inside a JSON string: printable ASCII but `"` and `\`. */
const PLAIN = /^[\x20\x21\x23-\x5b\x5d-\x7e]*$/;

const str = (s: string): string => (PLAIN.test(s) ? `"${s}"` : JSON.stringify(s));

export class AccessLog {
  readonly #logger: Logger;
  readonly #stream: Destination | undefined;
  readonly #bindings: string;
  /** The line's start up to the request id, for the millisecond `#time`: lines of one millisecond share it. */
  #time = -1;
  #head = '';
  /** The last User-Agent seen and its JSON (cut, escaped): a client sends the same one on every request. */
  #userAgent = '';
  #userAgentJson = '""';

  constructor(logger: Logger) {
    this.#logger = logger;
    const symbols = pino.symbols as unknown as Record<string, symbol>;
    const target = logger as unknown as Record<symbol, unknown>;
    const stream = target[symbols['streamSym']!] as Destination | undefined;
    const bindings = target[symbols['chindingsSym']!];
    // Only pino's plain JSON format (no formatters, no custom message key) is written directly.
    this.#stream = typeof stream?.write === 'function' && typeof bindings === 'string' ? stream : undefined;
    this.#bindings = typeof bindings === 'string' ? bindings : '';
  }

  /** False while the logger is above info (warn, error, silent...): nothing to build. */
  get enabled(): boolean {
    return this.#logger.isLevelEnabled('info');
  }

  write(f: AccessFields, time: number): void {
    if (this.#stream === undefined) {
      this.#logger.info({ ...f, userAgent: f.userAgent === undefined ? undefined : cut(f.userAgent) }, 'access');
      return;
    }
    if (time !== this.#time) {
      this.#time = time;
      this.#head = `{"level":30,"time":${time}${this.#bindings},"reqId":`;
    }
    // Not escaped, as they cannot need it: the method is one node's HTTP parser knows (a token of
    // capitals), the operation a catalogue name, the outcome, tier and scope names of this code,
    // the client address the kernel's. Whatever a client chose (request id, path, User-Agent,
    // refused parameters) is escaped.
    let line = `${this.#head}${str(f.reqId)},"method":"${f.method}","op":"${f.op}","path":${str(f.path)},"status":${f.status},"ms":${f.ms},"outcome":"${f.outcome}"`;
    if (f.tier !== undefined) line += `,"tier":"${f.tier}"`;
    if (f.scope !== undefined) line += `,"scope":"${f.scope}"`;
    if (f.detail !== undefined) line += `,"detail":${str(f.detail)}`;
    if (f.upstreamStatus !== undefined) line += `,"upstreamStatus":${f.upstreamStatus}`;
    if (f.upstreamMs !== undefined) line += `,"upstreamMs":${f.upstreamMs}`;
    if (f.user !== undefined) line += `,"user":${f.user}`;
    if (f.bytes !== undefined) line += `,"bytes":${f.bytes}`;
    if (f.aborted) line += ',"aborted":true';
    if (f.refused !== undefined) line += `,"refused":${str(f.refused)}`;
    if (f.client !== undefined) line += `,"client":"${f.client}"`;
    if (f.userAgent !== undefined) {
      if (f.userAgent !== this.#userAgent) {
        this.#userAgent = f.userAgent;
        this.#userAgentJson = str(cut(f.userAgent));
      }
      line += `,"userAgent":${this.#userAgentJson}`;
    }
    this.#stream.write(`${line},"msg":"access"}\n`);
  }
}

const cut = (userAgent: string): string => (userAgent.length > MAX_USER_AGENT_CHARS ? userAgent.slice(0, MAX_USER_AGENT_CHARS) : userAgent);
