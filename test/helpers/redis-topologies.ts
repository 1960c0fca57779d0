/**
 * The real thing for every Redis mode tm-cache offers, on free loopback ports, never the
 * machine's shared Redis: a six-node Redis Cluster (three masters, one replica each) and a
 * Sentinel set (a master, a replica, three sentinels), both with AUTH when given a password,
 * and the means to fail them over. Each lives in its own temporary directory (cluster state
 * files, sentinel configs, which sentinels rewrite); every process is killed when the test
 * process exits (redis.ts), and `stop()` removes the directory.
 */
import { execFile, execFileSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { findFreePort, spawnServer, terminate, waitUntilReady } from './redis.js';

const run = promisify(execFile);
const SETTLE_TIMEOUT_MS = 30_000;

/** A private CA and a certificate it issued for localhost and 127.0.0.1, as an operator's own PKI would: PEM files in `dir`. */
export interface TestPki {
  readonly ca: string;
  readonly cert: string;
  readonly key: string;
}

export function makeTestPki(dir: string): TestPki {
  const ssl = (...args: string[]): void => void execFileSync('openssl', args, { cwd: dir, stdio: 'ignore' });
  ssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=tm-cache test CA');
  ssl('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=localhost');
  writeFileSync(join(dir, 'san.ext'), 'subjectAltName=DNS:localhost,IP:127.0.0.1\n');
  ssl('x509', '-req', '-in', 'server.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'server.pem', '-days', '2', '-extfile', 'san.ext');
  return { ca: join(dir, 'ca.pem'), cert: join(dir, 'server.pem'), key: join(dir, 'server.key') };
}

/** TLS on `{tlsPort}` besides the plain port (which readiness pings), clients not asked for certificates. */
function tlsArgs(pki: TestPki): string[] {
  return ['--tls-port', '{tlsPort}', '--tls-cert-file', pki.cert, '--tls-key-file', pki.key, '--tls-ca-cert-file', pki.ca, '--tls-auth-clients', 'no'];
}

interface Node {
  readonly port: number;
  readonly tlsPort: number;
  child: ChildProcess;
}

async function startNode(extra: readonly string[], dir: string): Promise<Node> {
  const port = await findFreePort();
  // A cluster's bus port is the port + 10000 unless told: that one may be taken, or past 65535.
  const busPort = extra.includes('--cluster-enabled') ? await findFreePort() : 0;
  const tlsPort = extra.includes('{tlsPort}') ? await findFreePort() : 0;
  const args = extra.map((a) => a.replaceAll('{port}', String(port)).replaceAll('{busPort}', String(busPort)).replaceAll('{tlsPort}', String(tlsPort)));
  const child = spawnServer(port, args, dir);
  await waitUntilReady(child, port);
  return { port, tlsPort, child };
}

async function until<T>(what: string, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + SETTLE_TIMEOUT_MS;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch (error) {
      last = error;
    }
    await sleep(100);
  }
  throw new Error(`${what} within ${SETTLE_TIMEOUT_MS} ms${last instanceof Error ? ` (last: ${last.message})` : ''}`);
}

/** One command to one server, on a connection of its own. */
async function ask(port: number, password: string | undefined, ...command: string[]): Promise<unknown> {
  const client = new Redis({ host: '127.0.0.1', port, lazyConnect: true, maxRetriesPerRequest: 0, ...(password ? { password } : {}) });
  try {
    await client.connect();
    return await client.call(command[0]!, ...command.slice(1));
  } finally {
    client.disconnect();
  }
}

/**
 * A replica's first sync starts at once (not after the diskless default of 5 s): a replica that
 * never synced is not allowed to fail over, and the tests wait for every link to be up.
 */
const SYNC_AT_ONCE = ['--repl-diskless-sync-delay', '0'];

/** Every replica among `ports` has its link to its master up. */
async function replicasInSync(ports: readonly number[], password: string | undefined): Promise<true | undefined> {
  for (const port of ports) {
    const info = String(await ask(port, password, 'INFO', 'replication'));
    if (info.includes('role:slave') && !info.includes('master_link_status:up')) return undefined;
  }
  return true;
}

function authArgs(password: string | undefined): string[] {
  return password ? ['--requirepass', password, '--masterauth', password] : [];
}

export interface ClusterHandle {
  /** host:port of every node, for `cache.redis.nodes` (the TLS ports of a TLS cluster). */
  readonly nodes: string[];
  /** The keys matching `pattern` in the whole cluster (KEYS on every master, on its plain port). */
  keys(pattern: string): Promise<string[]>;
  /**
   * Kills (SIGKILL) the master that serves `slot`'s keys and waits until its replica has taken
   * the slot over and the cluster says ok again; answers the new master's port.
   */
  killMasterOf(slot: number): Promise<number>;
  stop(): Promise<void>;
}

/**
 * `tls`: the nodes also listen with TLS, and talk to each other (bus, replication) over it; the
 * cluster is made through the TLS ports, and TLS clients are told TLS ports (Redis 7).
 */
export async function startCluster(options: { password?: string; tls?: TestPki } = {}): Promise<ClusterHandle> {
  const { password, tls } = options;
  const dir = mkdtempSync(join(tmpdir(), 'tmc-cluster-'));
  const args = [
    '--cluster-enabled',
    'yes',
    '--cluster-port',
    '{busPort}',
    '--cluster-config-file',
    'nodes-{port}.conf',
    '--cluster-node-timeout',
    '1000',
    ...SYNC_AT_ONCE,
    ...authArgs(password),
    ...(tls ? [...tlsArgs(tls), '--tls-cluster', 'yes', '--tls-replication', 'yes'] : []),
  ];
  const nodes = await Promise.all(Array.from({ length: 6 }, () => startNode(args, dir)));
  const addresses = nodes.map((n) => `127.0.0.1:${tls ? n.tlsPort : n.port}`);
  await run('redis-cli', [
    ...(password ? ['-a', password, '--no-auth-warning'] : []),
    ...(tls ? ['--tls', '--cacert', tls.ca] : []),
    '--cluster',
    'create',
    ...addresses,
    '--cluster-replicas',
    '1',
    '--cluster-yes',
  ]);
  const alive = new Set(nodes);
  const settled = async (): Promise<void> => {
    await until('the cluster did not say cluster_state:ok on every live node', async () => {
      for (const n of alive) {
        const info = String(await ask(n.port, password, 'CLUSTER', 'INFO'));
        if (!info.includes('cluster_state:ok')) return undefined;
      }
      return true;
    });
  };
  await settled();
  await until('the replicas did not sync with their masters', () =>
    replicasInSync(
      nodes.map((n) => n.port),
      password,
    ),
  );
  /** The port of the master serving `slot`, as a live node sees it. */
  const masterOf = async (slot: number): Promise<number | undefined> => {
    const [any] = alive;
    const slots = (await ask(any!.port, password, 'CLUSTER', 'SLOTS')) as [number, number, [string, number]][];
    return slots.find(([from, to]) => from <= slot && slot <= to)?.[2][1];
  };
  return {
    nodes: addresses,
    keys: async (pattern) => {
      const found: string[] = [];
      for (const n of alive) {
        if (String(await ask(n.port, password, 'ROLE')).startsWith('master')) found.push(...((await ask(n.port, password, 'KEYS', pattern)) as string[]));
      }
      return found;
    },
    killMasterOf: async (slot) => {
      const port = await masterOf(slot);
      const victim = nodes.find((n) => n.port === port)!;
      alive.delete(victim);
      await terminate(victim.child, 'SIGKILL');
      const promoted = await until(`no replica took slot ${slot} over from ${port}`, async () => {
        const now = await masterOf(slot);
        return now !== undefined && now !== port ? now : undefined;
      });
      await settled();
      return promoted;
    },
    stop: async () => {
      await Promise.all(nodes.map((n) => terminate(n.child, 'SIGTERM')));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export interface SentinelHandle {
  /** host:port of every sentinel, for `cache.redis.sentinels` (their TLS ports with TLS). */
  readonly sentinels: string[];
  readonly name: string;
  /** The plain port of the server the sentinels name as master now. */
  masterPort(): Promise<number>;
  /** The keys matching `pattern` on the master. */
  keys(pattern: string): Promise<string[]>;
  /** Kills (SIGKILL) the master and waits until the sentinels name the replica as master; answers its plain port. */
  killMaster(): Promise<number>;
  stop(): Promise<void>;
}

/**
 * A master, one replica and three sentinels (quorum 2), down-after 500 ms. `password` is the
 * servers' AUTH (the sentinels know it through auth-pass); `sentinelPassword` the sentinels' own.
 * `tls`: servers and sentinels also listen with TLS, and replication and the sentinels' own
 * connections use it, so the sentinels name the master by its TLS port.
 */
export async function startSentinels(options: { password?: string; sentinelPassword?: string; tls?: TestPki } = {}): Promise<SentinelHandle> {
  const { password, sentinelPassword, tls } = options;
  const name = 'tmc-master';
  const dir = mkdtempSync(join(tmpdir(), 'tmc-sentinel-'));
  const tlsServer = tls ? [...tlsArgs(tls), '--tls-replication', 'yes'] : [];
  const master = await startNode([...SYNC_AT_ONCE, ...authArgs(password), ...tlsServer], dir);
  const announced = (n: Node): number => (tls ? n.tlsPort : n.port);
  const replica = await startNode([...SYNC_AT_ONCE, ...authArgs(password), ...tlsServer, '--replicaof', '127.0.0.1', String(announced(master))], dir);
  const servers = [master, replica];
  const sentinels: Node[] = [];
  for (let i = 0; i < 3; i++) {
    const file = join(dir, `sentinel-${i}.conf`);
    writeFileSync(
      file,
      [
        `sentinel monitor ${name} 127.0.0.1 ${announced(master)} 2`,
        `sentinel down-after-milliseconds ${name} 500`,
        `sentinel failover-timeout ${name} 5000`,
        ...(password ? [`sentinel auth-pass ${name} ${password}`] : []),
        ...(sentinelPassword ? [`requirepass ${sentinelPassword}`, `sentinel sentinel-pass ${sentinelPassword}`] : []),
        '',
      ].join('\n'),
    );
    sentinels.push(await startNode([file, '--sentinel', ...tlsServer], dir));
  }
  const askSentinel = (port: number, ...command: string[]): Promise<unknown> => ask(port, sentinelPassword, ...command);
  /** The server the sentinels name as master now. */
  const masterNode = async (): Promise<Node | undefined> => {
    const port = Number(((await askSentinel(sentinels[0]!.port, 'SENTINEL', 'get-master-addr-by-name', name)) as string[])[1]);
    return servers.find((n) => announced(n) === port);
  };
  // Ready when every sentinel knows the other two and the replica is in sync.
  await until('the sentinels did not find each other and the replica', async () => {
    for (const s of sentinels) {
      const fields = (await askSentinel(s.port, 'SENTINEL', 'master', name)) as string[];
      const info = Object.fromEntries(fields.flatMap((v, i) => (i % 2 === 0 ? [[v, fields[i + 1]]] : [])));
      if (info['num-other-sentinels'] !== '2' || info['num-slaves'] !== '1') return undefined;
    }
    return replicasInSync([replica.port], password);
  });
  return {
    sentinels: sentinels.map((s) => `127.0.0.1:${announced(s)}`),
    name,
    masterPort: async () => (await masterNode())!.port,
    keys: async (pattern) => (await ask((await masterNode())!.port, password, 'KEYS', pattern)) as string[],
    killMaster: async () => {
      const victim = (await masterNode())!;
      await terminate(victim.child, 'SIGKILL');
      return until(`the sentinels did not promote a replica of ${victim.port}`, async () => {
        const now = await masterNode();
        if (now === undefined || now === victim) return undefined;
        const role = String(await ask(now.port, password, 'ROLE'));
        return role.startsWith('master') ? now.port : undefined;
      });
    },
    stop: async () => {
      await Promise.all([...sentinels, ...servers].map((n) => terminate(n.child, 'SIGTERM')));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
