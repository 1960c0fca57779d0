/**
 * An instance that plays the attacker where the emulator cannot: it answers GET /user (user 7) and
 * sends huge bodies, announced by Content-Length or chunked, until the proxy hangs up. Used by
 * test/security and by the bench (scenario-security). Listens on 127.0.0.1, port 0.
 */
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** What a path answers: `bytes` of JSON-typed filler, with a Content-Length when `announce`. */
export interface HugeAnswer {
  readonly bytes: number;
  readonly announce: boolean;
}

export interface HostileUpstream {
  readonly url: string;
  /** Requests received, by path (without query). */
  readonly requests: Map<string, number>;
  /** Bytes of the last answer to each path accepted by the socket before it closed or ended. */
  readonly bytesWritten: Map<string, number>;
  close(): Promise<void>;
}

const CHUNK = Buffer.alloc(64 * 1024, 0x20);

export async function startHostileUpstream(answerFor: (path: string) => HugeAnswer | undefined): Promise<HostileUpstream> {
  const requests = new Map<string, number>();
  const bytesWritten = new Map<string, number>();
  const server = createServer((req, res) => {
    const path = (req.url ?? '').split('?')[0]!;
    requests.set(path, (requests.get(path) ?? 0) + 1);
    if (path === '/api/v1/user') return void res.writeHead(200, { 'content-type': 'application/json' }).end('{"id":7}');
    const answer = answerFor(path);
    if (answer === undefined) return void res.writeHead(404).end();
    res.writeHead(200, { 'content-type': 'application/json', ...(answer.announce ? { 'content-length': String(answer.bytes) } : {}) });
    pump(res, answer.bytes, (sent) => bytesWritten.set(path, sent));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    bytesWritten,
    close: async () => {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/** Writes `total` bytes with backpressure, stopping as soon as the other side hangs up. */
function pump(res: ServerResponse, total: number, onSent: (sent: number) => void): void {
  let sent = 0;
  let closed = false;
  res.on('close', () => (closed = true));
  const more = (): void => {
    while (!closed && sent < total) {
      sent += CHUNK.length;
      onSent(sent);
      if (!res.write(CHUNK)) return void res.once('drain', more);
    }
    if (!closed) res.end();
  };
  more();
}
