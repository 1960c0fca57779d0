/**
 * A request sent byte for byte as written, for request targets no HTTP client would send as
 * they are (dot segments, backslashes, absolute-form), over a fresh connection, and the response
 * read until the server closes it.
 */
import { connect } from 'node:net';

export interface RawResponse {
  readonly status: number;
  readonly headers: Record<string, string>;
  readonly text: string;
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
  const { hostname, port } = new URL(url);
  const socket = connect({ port: Number(port), host: hostname, ...(localAddress === undefined ? {} : { localAddress }) });
  const lines = [`${method} ${target} HTTP/1.1`, `Host: ${hostname}`, 'Connection: close'];
  for (const [name, value] of Object.entries(headers)) lines.push(`${name}: ${value}`);
  if (body !== undefined) lines.push('Content-Type: application/json', `Content-Length: ${Buffer.byteLength(body)}`);
  // Not end(): a half-closed client may lose its response; Connection: close ends the exchange.
  socket.write(`${lines.join('\r\n')}\r\n\r\n${body ?? ''}`);
  const chunks: Buffer[] = [];
  for await (const chunk of socket) chunks.push(chunk as Buffer);
  const [head = '', text = ''] = Buffer.concat(chunks).toString().split('\r\n\r\n', 2);
  const [statusLine = '', ...headerLines] = head.split('\r\n');
  const parsed = Object.fromEntries(headerLines.map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]));
  return { status: Number(statusLine.split(' ')[1]), headers: parsed, text };
}
