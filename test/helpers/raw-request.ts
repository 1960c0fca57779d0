/**
 * A request sent byte for byte as written, for request targets no HTTP client would send as
 * they are (dot segments, backslashes, absolute-form, a fragment) or a body that waits for
 * `100 Continue`, over a fresh connection, and the response read until it is whole (its
 * Content-Length, its last chunk, or no body by its status) or the server closes the connection.
 */
import { connect, type Socket } from 'node:net';

export interface RawResponse {
  readonly status: number;
  readonly headers: Record<string, string>;
  readonly text: string;
  /** The statuses of the interim (1xx) answers read before this one, in order. */
  readonly interim: readonly number[];
}

/**
 * A POST with body `{}` to `target`, as written, with a credential (tm-cache answers an API
 * request without one 401 itself: passthrough/budgeted.ts).
 */
export function sendRaw(proxyUrl: string, target: string): Promise<RawResponse> {
  return sendRawRequest(proxyUrl, 'POST', target, { authorization: 'Bearer raw-request' }, '{}');
}

/**
 * Any method and request target, byte for byte, with the given headers and an optional JSON body,
 * over a fresh connection. A HEAD's response has no body; the server's close ends the exchange.
 */
export async function sendRawRequest(
  url: string,
  method: string,
  target: string,
  headers: Record<string, string> = {},
  body?: string,
  localAddress?: string,
): Promise<RawResponse> {
  const socket = open(url, localAddress);
  const lines = head(url, method, target, headers);
  if (body !== undefined) lines.push('Content-Type: application/json', `Content-Length: ${Buffer.byteLength(body)}`);
  // Not end(): a half-closed client may lose its response; Connection: close ends the exchange.
  socket.write(`${lines.join('\r\n')}\r\n\r\n${body ?? ''}`);
  return readResponse(socket, method);
}

/**
 * A JSON body sent as a client with `Expect: 100-continue` sends it (RFC 9110 §10.1.1): the head
 * first, the body only once the server said `100 Continue` (never, if it answered at once), framed
 * by `Transfer-Encoding: chunked` (in two chunks) or by `Content-Length`.
 */
export async function sendAfterContinue(
  url: string,
  method: string,
  target: string,
  headers: Record<string, string>,
  body: string,
  framing: 'chunked' | 'content-length',
): Promise<RawResponse> {
  const socket = open(url);
  const lines = head(url, method, target, headers);
  lines.push('Expect: 100-continue', 'Content-Type: application/json');
  lines.push(framing === 'chunked' ? 'Transfer-Encoding: chunked' : `Content-Length: ${Buffer.byteLength(body)}`);
  socket.write(`${lines.join('\r\n')}\r\n\r\n`);
  return readResponse(socket, method, () => socket.write(framing === 'chunked' ? chunked(body) : body));
}

function open(url: string, localAddress?: string): Socket {
  const { hostname, port } = new URL(url);
  return connect({ port: Number(port), host: hostname, ...(localAddress === undefined ? {} : { localAddress }) });
}

function head(url: string, method: string, target: string, headers: Record<string, string>): string[] {
  const lines = [`${method} ${target} HTTP/1.1`, `Host: ${new URL(url).hostname}`, 'Connection: close'];
  for (const [name, value] of Object.entries(headers)) lines.push(`${name}: ${value}`);
  return lines;
}

/** `text` in two chunks and the last, empty one (RFC 9112 §7.1). */
function chunked(text: string): string {
  const half = Math.ceil(text.length / 2);
  return [text.slice(0, half), text.slice(half)].map((part) => `${Buffer.byteLength(part).toString(16)}\r\n${part}\r\n`).join('') + '0\r\n\r\n';
}

/**
 * Reads until the final response is whole or the server closes, then closes the connection
 * (a server may keep it open whatever the request's `Connection: close` said). `onContinue` is
 * called once, when a 100 Continue has been read.
 */
async function readResponse(socket: Socket, method: string, onContinue?: () => void): Promise<RawResponse> {
  const chunks: Buffer[] = [];
  let continued = false;
  for await (const chunk of socket) {
    chunks.push(chunk as Buffer);
    const response = parseResponse(Buffer.concat(chunks).toString('latin1'));
    if (onContinue !== undefined && !continued && response.interim.includes(100)) {
      continued = true;
      onContinue();
    }
    if (isWhole(response, method)) break;
  }
  socket.destroy();
  return parseResponse(Buffer.concat(chunks).toString());
}

/** Whether `response` (read as latin1: one character a byte) holds the whole final response. */
function isWhole(response: RawResponse & { readonly headed: boolean }, method: string): boolean {
  if (!response.headed) return false;
  if (method === 'HEAD' || response.status === 204 || response.status === 304) return true;
  const length = response.headers['content-length'];
  if (length !== undefined) return response.text.length >= Number(length);
  return /chunked/i.test(response.headers['transfer-encoding'] ?? '') && response.text.endsWith('0\r\n\r\n');
}

/** The final response of what was read, the interim (1xx) ones before it counted apart; `headed` once its head was read whole. */
function parseResponse(read: string): RawResponse & { readonly headed: boolean } {
  const interim: number[] = [];
  let rest = read;
  for (;;) {
    const end = rest.indexOf('\r\n\r\n');
    const headPart = end === -1 ? rest : rest.slice(0, end);
    const text = end === -1 ? '' : rest.slice(end + 4);
    const [statusLine = '', ...headerLines] = headPart.split('\r\n');
    const status = Number(statusLine.split(' ')[1]);
    if (status >= 100 && status < 200 && end !== -1) {
      interim.push(status);
      rest = text;
      continue;
    }
    const headers = Object.fromEntries(headerLines.map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]));
    return { status, headers, text, interim, headed: end !== -1 };
  }
}
