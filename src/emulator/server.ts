/**
 * startEmulator: buildEmulator + listen. Prints nothing; the caller (CLI, test helper) decides
 * what to say. Port 0 picks a free port; `url` is the real one.
 */
import type { AddressInfo } from 'node:net';
import { buildEmulator, type EmulatorOptions } from './app.js';

export interface EmulatorServerOptions extends EmulatorOptions {
  readonly host: string;
  readonly port: number;
}

export interface RunningEmulator {
  /** Base URL without a trailing slash, e.g. http://127.0.0.1:4010 (the API is under /api/v1). */
  readonly url: string;
  close(): Promise<void>;
}

export async function startEmulator(opts: EmulatorServerOptions): Promise<RunningEmulator> {
  const app = await buildEmulator({ seed: opts.seed, scale: opts.scale, nowMs: opts.nowMs });
  await app.listen({ host: opts.host, port: opts.port });
  const address = app.server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return { url: `http://${host}:${address.port}`, close: () => app.close() };
}
