/**
 * A real emulator on 127.0.0.1, port 0, and its control plane as plain functions. Used by the
 * emulator's own tests and by every proxy test.
 *
 *   const em = await startTestEmulator();            // seed 42, small
 *   await request(`${em.url}/api/v1/user`, { headers: { authorization: `Bearer ${em.tokens.admin().token}` } });
 *   (await em.stats()).by_route['GET /api/v1/user']  // what reached it
 */
import { request } from 'undici';
import type { Faults } from '../../src/emulator/faults.js';
import type { Scale } from '../../src/emulator/model.js';
import { startEmulator } from '../../src/emulator/server.js';
import type { TokenInfo } from '../../src/emulator/state.js';
import type { StatsSnapshot } from '../../src/emulator/stats.js';

export type { Faults, StatsSnapshot, TokenInfo };

export interface TestTokens {
  readonly all: readonly TokenInfo[];
  /** The site admin (sees every project). */
  admin(): TokenInfo;
  /** The i-th member (0-based) with access to at least one project; members' projects overlap. */
  member(i: number): TokenInfo;
  /** A member who can access no project. */
  noAccess(): TokenInfo;
}

export interface TestEmulator {
  readonly url: string;
  readonly tokens: TestTokens;
  stats(): Promise<StatsSnapshot>;
  resetStats(): Promise<void>;
  faults(f: Faults): Promise<void>;
  clearFaults(): Promise<void>;
  /** POST /__emulator/mutations; answers the changed object, throws on a non-200. */
  mutate(m: { op: string } & Record<string, unknown>): Promise<any>;
  close(): Promise<void>;
}

async function call(url: string, method: 'GET' | 'POST' | 'PUT' | 'DELETE', body?: unknown): Promise<any> {
  const res = await request(url, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.body.text();
  if (res.statusCode !== 200) throw new Error(`${method} ${url} → ${res.statusCode}: ${text}`);
  return JSON.parse(text);
}

function makeTokens(all: TokenInfo[]): TestTokens {
  const pick = (found: TokenInfo | undefined, what: string) => {
    if (!found) throw new Error(`the emulator has no ${what} token`);
    return found;
  };
  const members = all.filter((t) => !t.is_admin && t.project_ids.length > 0);
  return {
    all,
    admin: () =>
      pick(
        all.find((t) => t.is_admin),
        'admin',
      ),
    member: (i) => pick(members[i], `member #${i}`),
    noAccess: () =>
      pick(
        all.find((t) => !t.is_admin && t.project_ids.length === 0),
        'no-access',
      ),
  };
}

export async function startTestEmulator(opts: { seed?: number; scale?: Scale; port?: number } = {}): Promise<TestEmulator> {
  const server = await startEmulator({ host: '127.0.0.1', port: opts.port ?? 0, seed: opts.seed ?? 42, scale: opts.scale ?? 'small' });
  const control = `${server.url}/__emulator`;
  const tokens = makeTokens(await call(`${control}/tokens`, 'GET'));
  return {
    url: server.url,
    tokens,
    stats: () => call(`${control}/stats`, 'GET'),
    resetStats: async () => void (await call(`${control}/stats/reset`, 'POST')),
    faults: async (f) => void (await call(`${control}/faults`, 'PUT', f)),
    clearFaults: async () => void (await call(`${control}/faults`, 'DELETE')),
    mutate: (m) => call(`${control}/mutations`, 'POST', m),
    close: () => server.close(),
  };
}
