/**
 * A hostile or odd upstream for the cases the emulator cannot play (an SSO page, a redirect, a
 * huge Retry-After, a server that accepts and never answers): a node:http server on 127.0.0.1,
 * port 0, whose answer each test sets, and a record of every request that reached it.
 *
 * GET /api/v1/user answers `{"id": N}` as JSON for `Bearer uN` (7 for any other token) unless the
 * test's `answer` handles it (returns true): give each test its own user, since tm-cache gates
 * and scopes by user id.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

export type Answer = (req: IncomingMessage, res: ServerResponse) => boolean | void;

export interface HostileUpstream {
  readonly url: string;
  /** `METHOD /path?query` of every request that reached it, in order. */
  readonly seen: string[];
  /** What it answers; set per test. */
  answer: Answer;
  close(): Promise<void>;
}

function userFor(req: IncomingMessage): string {
  const id = /^Bearer u(\d+)$/.exec(req.headers.authorization ?? '')?.[1];
  return JSON.stringify({ id: id === undefined ? 7 : Number(id), name: 'Zed' });
}

export async function startHostileUpstream(): Promise<HostileUpstream> {
  const sockets = new Set<Socket>();
  const upstream: HostileUpstream = { url: '', seen: [], answer: () => false, close: () => close(server, sockets) };
  const server = createServer((req, res) => {
    upstream.seen.push(`${req.method} ${req.url}`);
    if (upstream.answer(req, res) === true) return;
    if (req.url === '/api/v1/user') return void res.writeHead(200, { 'content-type': 'application/json' }).end(userFor(req));
    res.writeHead(500, { 'content-type': 'application/json' }).end('{"message":"not scripted","errors":{}}');
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return Object.assign(upstream, { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` });
}

/** Closes it, including connections it left hanging on purpose. */
async function close(server: Server, sockets: Set<Socket>): Promise<void> {
  for (const socket of sockets) socket.destroy();
  await new Promise((resolve) => server.close(resolve));
}

/** Answers `status` with `headers` and `body` to requests for `path` (exact, with query), and says it did. */
export function on(path: string, status: number, headers: Record<string, string>, body: string | Buffer = ''): Answer {
  return (req, res) => {
    if (req.url !== path) return false;
    res.writeHead(status, headers).end(body);
    return true;
  };
}
