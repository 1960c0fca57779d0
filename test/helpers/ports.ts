import { createServer } from 'node:net';

/**
 * Ports this process has handed out: the kernel may give a just-closed port to the next bind(0),
 * so two servers started together (a cluster's nodes, their bus and TLS ports) could otherwise
 * be told the same one.
 */
const handedOut = new Set<number>();

/** A port that was free a moment ago on 127.0.0.1 (bind port 0, read it, close), never one handed out before. */
export async function findFreePort(): Promise<number> {
  for (;;) {
    const port = await new Promise<number>((resolve, reject) => {
      const server = createServer();
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => {
        const address = server.address();
        const found = typeof address === 'object' && address ? address.port : 0;
        server.close(() => resolve(found));
      });
    });
    if (!handedOut.has(port)) {
      handedOut.add(port);
      return port;
    }
  }
}
