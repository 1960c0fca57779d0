import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { assertUpstream, CONFIG_OVERRIDES, loadConfig, loadConfigAsync, normalizeUpstreamUrl } from '../../src/config/load.js';
import { ConfigError } from '../../src/config/errors.js';
import { DEFAULT_CONFIG, RESOURCE_NAMES, type Config } from '../../src/config/schema.js';
import { keysWithoutComment } from '../helpers/yaml-comments.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const DEFAULT_YAML = join(ROOT, 'config/default.yaml');
const TMP = mkdtempSync(join(tmpdir(), 'tm-cache-config-'));
afterAll(() => rmSync(TMP, { recursive: true, force: true }));

const HEX_KEY = 'ab'.repeat(32);
const B64_KEY = Buffer.alloc(32, 7).toString('base64');
const HMAC = 'c3'.repeat(40);

let files = 0;
function writeConfig(yaml: string): string {
  const path = join(TMP, `config-${++files}.yaml`);
  writeFileSync(path, yaml);
  return path;
}

interface Sources {
  readonly file?: string;
  readonly env?: Record<string, string>;
  readonly argv?: readonly string[];
}
/** The secret a shared Redis needs (relations.ts): sources that configure Redis add it. */
const WITH_SECRET = { TM_CACHE_HMAC_SECRET: 'ab'.repeat(32) };

function load({ file, env = {}, argv = [] }: Sources = {}): Config {
  const configArgs = file === undefined ? [] : ['--config', writeConfig(file)];
  return loadConfig({ argv: [...configArgs, ...argv], env });
}

function configError(run: () => unknown): ConfigError {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return error as ConfigError;
  }
  throw new Error('expected a ConfigError, but loading succeeded');
}

/** Reads a dotted path (`cache.memory.maxBytes`) out of a config. */
function get(config: unknown, path: string): unknown {
  return path.split('.').reduce<unknown>((node, key) => (node as Record<string, unknown>)[key], config);
}

describe('defaults', () => {
  it('are DEFAULT_CONFIG when nothing is set', () => {
    expect(load()).toEqual(DEFAULT_CONFIG);
  });

  it('returns a deeply frozen copy and never changes DEFAULT_CONFIG', () => {
    const before = structuredClone(DEFAULT_CONFIG);
    const config = load({ file: 'cache:\n  redis:\n    nodes: ["a:1"]\n', argv: ['--port', '1234'] });
    expect(config).not.toBe(DEFAULT_CONFIG);
    for (const path of ['', 'server', 'cache', 'cache.freshness.byResource', 'cache.redis.nodes', 'cache.redis.encryptionKeys']) {
      expect(Object.isFrozen(path === '' ? config : get(config, path)), path).toBe(true);
    }
    expect(() => {
      (config.server as { port: number }).port = 1;
    }).toThrow(TypeError);
    expect(DEFAULT_CONFIG).toEqual(before);
  });

  it('config/default.yaml parses to exactly DEFAULT_CONFIG', () => {
    expect(parseYaml(readFileSync(DEFAULT_YAML, 'utf8'))).toEqual(DEFAULT_CONFIG);
  });

  it('config/default.yaml loads as a --config file without changing anything', () => {
    expect(loadConfig({ argv: ['--config', DEFAULT_YAML], env: {} })).toEqual(DEFAULT_CONFIG);
  });

  it('config/default.yaml has a comment for every setting', () => {
    expect(keysWithoutComment(readFileSync(DEFAULT_YAML, 'utf8'))).toEqual([]);
  });

  it('config/default.yaml lists every flag and environment variable', () => {
    const text = readFileSync(DEFAULT_YAML, 'utf8');
    for (const { flag, env } of CONFIG_OVERRIDES) {
      if (flag !== undefined) expect(text).toContain(flag);
      if (env !== undefined) expect(text).toContain(env);
    }
  });

  it('config/default.yaml names each flag and environment variable on the row of its setting', () => {
    const rows = readFileSync(DEFAULT_YAML, 'utf8')
      .split('\n')
      .filter((line) => /^#\s+[a-z]+\.[\w.]+\s/.test(line));
    const table = rows.map((row) =>
      row
        .slice(1)
        .trim()
        .split(/\s+/)
        .filter((word) => /^(--|TM_CACHE_|[a-z]+\.)/.test(word)),
    );
    const expected = CONFIG_OVERRIDES.map(({ setting, flag, env }) => [setting, ...(flag ? [flag] : []), ...(env ? [env] : [])]);
    const bySetting = (a: string[], b: string[]) => a[0]!.localeCompare(b[0]!);
    expect(table.sort(bySetting)).toEqual(expected.sort(bySetting));
  });

  it('byResource accepts exactly the resources of the catalogue', () => {
    expect([...RESOURCE_NAMES].sort()).toEqual([
      'automation_source',
      'current_user',
      'group',
      'milestone',
      'project',
      'project_user',
      'result',
      'role',
      'run',
      'session',
      'user',
    ]);
  });
});

describe('the --config file', () => {
  it('is merged key by key over the defaults', () => {
    const config = load({ file: 'cache:\n  memory:\n    maxBytes: 16777216\nserver:\n  logLevel: debug\n' });
    expect(config.cache.memory).toEqual({ maxBytes: 16 * 1024 * 1024, maxEntryBytes: 8 * 1024 * 1024 });
    expect(config.server).toEqual({ ...DEFAULT_CONFIG.server, logLevel: 'debug' });
    expect(config.upstream).toEqual(DEFAULT_CONFIG.upstream);
    expect(config.cache.redis).toEqual(DEFAULT_CONFIG.cache.redis);
  });

  it('fills a per-resource rule from freshness.default, including a default the file changed', () => {
    const config = load({
      file: [
        'cache:',
        '  freshness:',
        '    default: { ttlMs: 1000 }',
        '    byResource:',
        '      role: { ttlMs: 300000 }',
        '      group: { staleWhileRevalidateMs: 5 }',
      ].join('\n'),
    });
    expect(config.cache.freshness.default).toEqual({ ttlMs: 1000, staleWhileRevalidateMs: 30_000 });
    expect(config.cache.freshness.byResource).toEqual({
      role: { ttlMs: 300_000, staleWhileRevalidateMs: 30_000 },
      group: { ttlMs: 1000, staleWhileRevalidateMs: 5 },
    });
  });

  it('may be empty or comments only', () => {
    expect(load({ file: '' })).toEqual(DEFAULT_CONFIG);
    expect(load({ file: '# nothing here\n' })).toEqual(DEFAULT_CONFIG);
  });

  it('is found through TM_CACHE_CONFIG, and --config wins over it', () => {
    const fromEnv = writeConfig('server:\n  port: 1111\n');
    const fromFlag = writeConfig('server:\n  port: 2222\n');
    expect(loadConfig({ argv: [], env: { TM_CACHE_CONFIG: fromEnv } }).server.port).toBe(1111);
    expect(loadConfig({ argv: [`--config=${fromFlag}`], env: { TM_CACHE_CONFIG: fromEnv } }).server.port).toBe(2222);
  });

  it('is resolved against cwd when relative', () => {
    const dir = join(TMP, 'relative');
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'tm.yaml'), 'server:\n  port: 3333\n');
    expect(loadConfig({ argv: ['--config', 'tm.yaml'], env: {}, cwd: dir }).server.port).toBe(3333);
  });

  it.each([
    ['a missing file', () => loadConfig({ argv: ['--config', join(TMP, 'absent.yaml')], env: {} }), ['config file (from --config)', 'absent.yaml', 'ENOENT']],
    ['a file that is not YAML', () => load({ file: 'server:\n  port: [\n' }), ['not valid YAML', 'line']],
    ['a file that is a list', () => load({ file: '- 1\n- 2\n' }), ['received a list', 'allowed: a mapping of settings']],
    [
      'a section given as a scalar',
      () => load({ file: 'cache:\n  memory: 5\n' }),
      ['cache.memory', 'received number 5', 'allowed: a mapping with keys maxBytes, maxEntryBytes'],
    ],
    ['a duplicated key', () => load({ file: 'server:\n  port: 1\n  port: 2\n' }), ['not valid YAML', 'unique']],
  ])('%s is a ConfigError', (_, run, fragments) => {
    const error = configError(run);
    for (const fragment of fragments) expect(error.message).toContain(fragment);
  });

  it('refuses a YAML warning (an unresolved tag) as an error, at start as on a reload, without its value', async () => {
    const secret = 'abc0123456789sixteen-more-chars';
    const path = writeConfig(`admin:\n  token: !${secret}\n`);
    const errors = [configError(() => loadConfig({ argv: ['--config', path], env: {} }))];
    errors.push(
      await loadConfigAsync({ argv: ['--config', path], env: {} }).then(
        () => undefined as never,
        (e: unknown) => e as ConfigError,
      ),
    );
    for (const error of errors) {
      expect(error).toBeInstanceOf(ConfigError);
      expect(error.message).toContain('YAML warning at line 2 (TAG_RESOLVE_FAILED)');
      expect(error.message).not.toContain(secret);
    }
  });

  it('refuses a path that is not a regular file (a FIFO, a directory), naming it, without waiting on it', async () => {
    const fifo = join(TMP, 'config.fifo');
    execFileSync('mkfifo', [fifo]);
    for (const path of [fifo, TMP]) {
      const errors = [configError(() => loadConfig({ argv: ['--config', path], env: {} }))];
      errors.push(
        await loadConfigAsync({ argv: ['--config', path], env: {} }).then(
          () => undefined as never,
          (e: unknown) => e as ConfigError,
        ),
      );
      for (const error of errors) expect(error.message).toContain(`${JSON.stringify(path)} is not a regular file`);
    }
  });

  it('does not quote the offending line of invalid YAML, which may hold a secret', () => {
    const error = configError(() => load({ file: `identity:\n  hmacSecret: "${HMAC}\n  x: [\n` }));
    expect(error.message).not.toContain(HMAC);
  });
});

describe('unknown settings and flags', () => {
  it.each([
    ['cache:\n  memroy:\n    maxBytes: 1\n', 'unknown setting cache.memroy', 'allowed at cache: sharing, strict, honorClientNoCache'],
    ['upstrem:\n  url: https://x\n', 'unknown setting upstrem', 'allowed at top level: upstream, server, identity, access, log, admin, health, cache'],
    ['server:\n  managment_port: 1\n', 'unknown setting server.managment_port', 'managementPort'],
    ['cache:\n  freshness:\n    byResource:\n      runs: { ttlMs: 1 }\n', 'unknown key cache.freshness.byResource.runs', 'resource names: automation_source'],
    ['cache:\n  freshness:\n    byResource:\n      run: { ttl: 1 }\n', 'unknown setting cache.freshness.byResource.run.ttl', 'ttlMs, staleWhileRevalidateMs'],
    [`cache:\n  redis:\n    encryptionKeys:\n      "bad id": "${HEX_KEY}"\n`, 'unknown key cache.redis.encryptionKeys.bad id', 'key ids of 1 to 64'],
  ])('file %j is refused', (file, named, allowed) => {
    const error = configError(() => load({ file }));
    expect(error.message).toContain(named);
    expect(error.message).toContain(allowed);
  });

  it('reports unknown settings together with invalid values', () => {
    const error = configError(() => load({ file: 'cache:\n  memroy: 1\nserver:\n  port: -1\n', argv: ['--log-level', 'loud'] }));
    expect(error.problems).toHaveLength(3);
    expect(error.message).toContain('unknown setting cache.memroy');
    expect(error.message).toContain('server.port (from config file');
    expect(error.message).toContain('server.logLevel (from --log-level)');
  });

  it('takes a __proto__ key for an unknown setting, not for a prototype', () => {
    const error = configError(() => load({ file: '__proto__:\n  polluted: true\nserver:\n  __proto__: { port: 1 }\n' }));
    expect(error.problems).toHaveLength(2);
    expect(error.message).toContain('unknown setting __proto__ (in config file');
    expect(error.message).toContain('unknown setting server.__proto__ (in config file');
    expect(({} as Record<string, unknown>)['polluted']).toBeUndefined();
  });

  it.each([
    [['--nope'], 'unknown flag --nope'],
    [['--nope=1'], 'unknown flag --nope'],
    [['--ports', '1'], 'unknown flag --ports'],
    [['serve'], 'unexpected argument "serve"'],
    [['--port'], 'flag --port needs a value'],
    [['--port', '--host', 'x'], 'flag --port needs a value'],
  ])('argv %j is refused', (argv, named) => {
    const error = configError(() => load({ argv }));
    expect(error.message).toContain(named);
    expect(error.message).toMatch(/--upstream, --host, --port|--port VALUE or --port=VALUE/);
  });

  it('ignores environment variables it does not know, such as Kubernetes service links', () => {
    expect(load({ env: { TM_CACHE_SERVICE_HOST: '10.0.0.1', TM_CACHE_PORT_8080_TCP: 'tcp://10.0.0.1:8080' } })).toEqual(DEFAULT_CONFIG);
  });
});

describe('environment variables and flags', () => {
  const cases: readonly { setting: string; env?: string; flag?: string; raw: string; value: unknown; with?: Record<string, string> }[] = [
    { setting: 'upstream.url', env: 'TM_CACHE_UPSTREAM', flag: '--upstream', raw: 'https://tm.example.com', value: 'https://tm.example.com' },
    { setting: 'server.host', env: 'TM_CACHE_HOST', flag: '--host', raw: '0.0.0.0', value: '0.0.0.0' },
    { setting: 'server.port', env: 'TM_CACHE_PORT', flag: '--port', raw: '8081', value: 8081 },
    { setting: 'server.managementHost', env: 'TM_CACHE_MANAGEMENT_HOST', flag: '--management-host', raw: '::', value: '::' },
    { setting: 'server.managementPort', env: 'TM_CACHE_MANAGEMENT_PORT', flag: '--management-port', raw: '0', value: 0 },
    { setting: 'server.logLevel', env: 'TM_CACHE_LOG_LEVEL', flag: '--log-level', raw: 'debug', value: 'debug' },
    { setting: 'cache.redis.url', env: 'TM_CACHE_REDIS', flag: '--redis', raw: 'rediss://:pw@redis:6380/2', value: 'rediss://:pw@redis:6380/2' },
    { setting: 'identity.ttlMs', env: 'TM_CACHE_IDENTITY_TTL_MS', raw: '5000', value: 5000 },
    { setting: 'identity.hmacSecret', env: 'TM_CACHE_HMAC_SECRET', raw: HMAC, value: HMAC },
    { setting: 'log.access', env: 'TM_CACHE_LOG_ACCESS', raw: 'errors', value: 'errors' },
    { setting: 'cache.sharing', env: 'TM_CACHE_SHARING', raw: 'project', value: 'project' },
    { setting: 'admin.token', env: 'TM_CACHE_ADMIN_TOKEN', raw: 'an-admin-token-of-24-chars', value: 'an-admin-token-of-24-chars' },
    {
      setting: 'admin.viewerToken',
      env: 'TM_CACHE_ADMIN_VIEWER_TOKEN',
      raw: 'a-viewer-token-of-24-char',
      value: 'a-viewer-token-of-24-char',
      with: { TM_CACHE_ADMIN_TOKEN: 'an-admin-token-of-24-chars' },
    },
    { setting: 'cache.redis.username', env: 'TM_CACHE_REDIS_USERNAME', raw: 'tm-cache', value: 'tm-cache' },
    { setting: 'cache.redis.password', env: 'TM_CACHE_REDIS_PASSWORD', raw: 's3cret pass', value: 's3cret pass' },
    { setting: 'cache.redis.commandTimeoutMs', env: 'TM_CACHE_REDIS_COMMAND_TIMEOUT_MS', raw: '250', value: 250 },
    { setting: 'cache.redis.lockWaitMs', env: 'TM_CACHE_REDIS_LOCK_WAIT_MS', raw: '5000', value: 5000 },
    { setting: 'cache.redis.sentinelPassword', env: 'TM_CACHE_REDIS_SENTINEL_PASSWORD', raw: 'sentinel-pw', value: 'sentinel-pw' },
  ];

  it.each(cases.filter((c) => c.env !== undefined))('$env sets $setting', ({ setting, env, raw, value, with: more }) => {
    expect(get(load({ env: { ...WITH_SECRET, ...more, [env!]: raw } }), setting)).toEqual(value);
  });

  it('refuses a viewer token without an admin token, or equal to it, without showing either', () => {
    const viewer = 'a-viewer-token-of-24-char';
    const alone = configError(() => load({ env: { TM_CACHE_ADMIN_VIEWER_TOKEN: viewer } })).message;
    expect(alone).toContain('admin.viewerToken (from TM_CACHE_ADMIN_VIEWER_TOKEN): received <redacted>; allowed: empty while admin.token is empty');
    const same = configError(() => load({ env: { TM_CACHE_ADMIN_VIEWER_TOKEN: viewer, TM_CACHE_ADMIN_TOKEN: viewer } })).message;
    expect(same).toContain('a token other than admin.token');
    expect(alone + same).not.toContain(viewer);
  });

  it.each(cases.filter((c) => c.flag !== undefined))('$flag sets $setting, as two words or with =', ({ setting, flag, raw, value }) => {
    expect(get(load({ argv: [flag!, raw], env: WITH_SECRET }), setting)).toEqual(value);
    expect(get(load({ argv: [`${flag}=${raw}`], env: WITH_SECRET }), setting)).toEqual(value);
  });

  it('the table above covers every override', () => {
    const covered = new Set(cases.map((c) => c.setting));
    // The TLS settings name files that must hold a certificate and key: test/security/tls.test.ts sets them.
    const keyEnv = [
      'server.tls.certFile',
      'server.tls.keyFile',
      'server.tls.clientCaFile',
      'server.tls.management',
      'cache.redis.encryptionKeys',
      'cache.redis.encryptionKeyId',
    ];
    expect(CONFIG_OVERRIDES.map((o) => o.setting).filter((s) => !covered.has(s))).toEqual(keyEnv);
  });

  it('TM_CACHE_REDIS_ENCRYPTION_KEYS and _KEY_ID set the encryption keys', () => {
    const config = load({
      env: { TM_CACHE_REDIS_ENCRYPTION_KEYS: ` k2:${HEX_KEY} , k1:${B64_KEY},`, TM_CACHE_REDIS_ENCRYPTION_KEY_ID: 'k2' },
    });
    expect(config.cache.redis.encryptionKeys).toEqual({ k2: HEX_KEY, k1: B64_KEY });
    expect(config.cache.redis.encryptionKeyId).toBe('k2');
  });

  it('environment keys replace the keys of the file rather than adding to them', () => {
    const config = load({
      file: `cache:\n  redis:\n    encryptionKeys: { old: "${HEX_KEY}" }\n    encryptionKeyId: old\n`,
      env: { TM_CACHE_REDIS_ENCRYPTION_KEYS: `new:${B64_KEY}`, TM_CACHE_REDIS_ENCRYPTION_KEY_ID: 'new' },
    });
    expect(config.cache.redis.encryptionKeys).toEqual({ new: B64_KEY });
  });

  it('an empty environment variable counts as unset', () => {
    const config = load({ file: 'server:\n  port: 7000\n', env: { TM_CACHE_PORT: '', TM_CACHE_UPSTREAM: '  ', TM_CACHE_CONFIG: '' } });
    expect(config.server.port).toBe(7000);
    expect(config.upstream.url).toBe('');
  });

  it.each([
    ['file only', { file: 'server:\n  port: 1001\n' }, 1001],
    ['env beats file', { file: 'server:\n  port: 1001\n', env: { TM_CACHE_PORT: '1002' } }, 1002],
    ['flag beats env and file', { file: 'server:\n  port: 1001\n', env: { TM_CACHE_PORT: '1002' }, argv: ['--port', '1003'] }, 1003],
    ['flag beats file', { file: 'server:\n  port: 1001\n', argv: ['--port=1003'] }, 1003],
    ['the last of a repeated flag wins', { argv: ['--port', '1003', '--port', '1004'] }, 1004],
  ] as const)('precedence: %s', (_, sources, port) => {
    expect(load(sources).server.port).toBe(port);
  });

  it('an error names the source that set the value last', () => {
    const error = configError(() => load({ file: 'server:\n  port: 1\n', env: { TM_CACHE_PORT: 'x' }, argv: ['--port', 'y'] }));
    expect(error.message).toContain('server.port (from --port): received "y"');
    expect(error.problems).toHaveLength(1);
  });

  it('points at Kubernetes service links when TM_CACHE_PORT looks like one', () => {
    const error = configError(() => load({ env: { TM_CACHE_PORT: 'tcp://10.96.0.12:8080' } }));
    expect(error.message).toContain('enableServiceLinks: false');
  });
});

describe('upstream url', () => {
  it.each([
    ['https://tm.example.com', 'https://tm.example.com'],
    ['https://tm.example.com/', 'https://tm.example.com'],
    ['https://tm.example.com/api/v1', 'https://tm.example.com'],
    ['https://tm.example.com/api/v1/', 'https://tm.example.com'],
    ['http://127.0.0.1:3000/tm/api/v1', 'http://127.0.0.1:3000/tm'],
    ['https://tm.example.com/api/v2', 'https://tm.example.com/api/v2'],
  ])('%s becomes %s', (raw, url) => {
    expect(normalizeUpstreamUrl(raw)).toBe(url);
    expect(load({ argv: ['--upstream', raw] }).upstream.url).toBe(url);
  });

  it('empty is no error for loading, but assertUpstream says how to set one or run the demo', () => {
    const config = load();
    expect(config.upstream.url).toBe('');
    const error = configError(() => assertUpstream(config));
    expect(error.message).toBe('no upstream: set --upstream URL or TM_CACHE_UPSTREAM, or run `tm-cache demo` to try it against the built-in emulator');
    expect(() => assertUpstream(load({ env: { TM_CACHE_UPSTREAM: 'https://tm.example.com' } }))).not.toThrow();
  });
});

describe('invalid settings', () => {
  // [setting, how it is set, what the message shows as received, a fragment of what is allowed]
  const cases: readonly [string, Sources, string, string][] = [
    ['upstream.url', { argv: ['--upstream', 'ftp://tm.example.com'] }, '"ftp://tm.example.com"', 'http:// or https://'],
    ['upstream.url', { argv: ['--upstream', 'tm.example.com'] }, '"tm.example.com"', 'absolute'],
    ['upstream.url', { argv: ['--upstream', 'https://tm.example.com/?x=1'] }, '"https://tm.example.com/?<redacted>"', 'without credentials, query or fragment'],
    ['upstream.connectTimeoutMs', { file: 'upstream:\n  connectTimeoutMs: 0\n' }, '0', 'from 1 to 2147483647 (milliseconds)'],
    ['upstream.headersTimeoutMs', { file: 'upstream:\n  headersTimeoutMs: -5\n' }, '-5', 'from 1 to 2147483647'],
    ['upstream.bodyTimeoutMs', { file: 'upstream:\n  bodyTimeoutMs: 2.5\n' }, '2.5', 'durations are whole milliseconds'],
    ['upstream.bodyTimeoutMs', { file: 'upstream:\n  bodyTimeoutMs: 3000000000\n' }, '3000000000', 'from 1 to 2147483647'],
    ['upstream.connections', { file: 'upstream:\n  connections: 0\n' }, '0', 'an integer ≥ 1'],
    ['upstream.maxConcurrent', { file: 'upstream:\n  maxConcurrent: "64"\n' }, '"64"', 'an integer ≥ 1'],
    ['upstream.maxQueue', { file: 'upstream:\n  maxQueue: -1\n' }, '-1', 'an integer ≥ 0'],
    ['upstream.defaultRetryAfterMs', { file: 'upstream:\n  defaultRetryAfterMs: 0\n' }, '0', 'from 1 to'],
    ['server.host', { argv: ['--host', 'a b'] }, '"a b"', 'host name or IP address'],
    ['server.host', { file: 'server:\n  host: ""\n' }, '""', 'host name or IP address'],
    ['server.port', { argv: ['--port', '65536'] }, '65536', 'from 0 to 65535'],
    ['server.port', { env: { TM_CACHE_PORT: '80a' } }, '"80a"', 'from 0 to 65535'],
    ['server.managementPort', { env: { TM_CACHE_MANAGEMENT_PORT: '-1' } }, '-1', 'from 0 to 65535'],
    ['server.managementHost', { file: 'server:\n  managementHost: 1\n' }, '1', 'host name or IP address'],
    ['server.shutdownGraceMs', { file: 'server:\n  shutdownGraceMs: -1\n' }, '-1', 'from 0 to'],
    ['server.logLevel', { env: { TM_CACHE_LOG_LEVEL: 'verbose' } }, '"verbose"', 'one of fatal, error, warn, info, debug, trace, silent'],
    ['upstream.maxRetryAfterMs', { file: 'upstream:\n  maxRetryAfterMs: 0\n' }, '0', 'from 1 to'],
    ['upstream.forwardPrefixes', { file: 'upstream:\n  forwardPrefixes: [api/]\n' }, '["api/"]', 'each starting with /'],
    ['upstream.forwardPrefixes', { file: 'upstream:\n  forwardPrefixes: /api/\n' }, '"/api/"', 'a list of path prefixes'],
    ['upstream.budget.requestsPerSecond', { file: 'upstream:\n  budget:\n    requestsPerSecond: -1\n' }, '-1', '0: no fixed budget, learned from the instance'],
    [
      'upstream.budget.requestsPerSecond',
      { file: 'upstream:\n  budget:\n    requestsPerSecond: fast\n' },
      '"fast"',
      'a number of requests per second from 0 to 100000',
    ],
    [
      'upstream.budget.burst',
      { file: 'upstream:\n  budget:\n    requestsPerSecond: 40\n    burst: 2.5\n' },
      '2.5',
      "an integer from 0 to 1000000 (requests; 0: one second's worth of the rate)",
    ],
    ['upstream.budget.burst', { file: 'upstream:\n  budget:\n    burst: 50\n' }, '50', '0 when upstream.budget.requestsPerSecond is 0'],
    ['upstream.budget.fallbackShare', { file: 'upstream:\n  budget:\n    fallbackShare: 0\n' }, '0', 'a fraction above 0 and at most 1'],
    ['upstream.budget.fallbackShare', { file: 'upstream:\n  budget:\n    fallbackShare: 1.5\n' }, '1.5', 'a fraction above 0 and at most 1'],
    ['upstream.budget.maxWaitMs', { file: 'upstream:\n  budget:\n    maxWaitMs: -1\n' }, '-1', 'from 0 to'],
    ['identity.ttlMs', { env: { TM_CACHE_IDENTITY_TTL_MS: '0' } }, '0', 'from 1 to'],
    ['identity.ttlMs', { env: { TM_CACHE_IDENTITY_TTL_MS: '60s' } }, '"60s"', 'milliseconds'],
    ['identity.maxEntries', { file: 'identity:\n  maxEntries: 0\n' }, '0', 'an integer ≥ 1'],
    ['access.ttlMs', { file: 'access:\n  ttlMs: null\n' }, 'null', 'from 1 to'],
    ['cache.strict', { file: 'cache:\n  strict: "yes"\n' }, '"yes"', 'true or false'],
    ['cache.honorClientNoCache', { file: 'cache:\n  honorClientNoCache: 1\n' }, '1', 'true or false'],
    ['cache.staleIfErrorMs', { file: 'cache:\n  staleIfErrorMs: -1\n' }, '-1', 'from 0 to'],
    ['cache.freshness.default.ttlMs', { file: 'cache:\n  freshness:\n    default:\n      ttlMs: -1\n' }, '-1', 'from 0 to'],
    ['cache.freshness.settled.staleWhileRevalidateMs', { file: 'cache:\n  freshness:\n    settled:\n      staleWhileRevalidateMs: x\n' }, '"x"', 'from 0 to'],
    ['cache.freshness.byResource.run.ttlMs', { file: 'cache:\n  freshness:\n    byResource:\n      run: { ttlMs: -3 }\n' }, '-3', 'from 0 to'],
    ['cache.memory.maxBytes', { file: 'cache:\n  memory:\n    maxBytes: 0\n' }, '0', 'an integer ≥ 1 (bytes)'],
    [
      'cache.memory.maxEntryBytes',
      { file: 'cache:\n  memory:\n    maxBytes: 1000\n    maxEntryBytes: 1001\n' },
      '1001',
      'at most cache.memory.maxBytes (1000)',
    ],
    ['cache.redis.url', { argv: ['--redis', 'http://redis:6379'] }, '"http://redis:6379"', 'redis:// or rediss://'],
    ['cache.redis.url', { env: { TM_CACHE_REDIS: 'redis://redis:6379/zero' } }, '"redis://redis:6379/zero"', '[/db]'],
    ['cache.redis.mode', { file: 'cache:\n  redis:\n    mode: replicated\n' }, '"replicated"', 'one of standalone, cluster, sentinel'],
    ['cache.redis.nodes', { file: 'cache:\n  redis:\n    nodes: [redis-0]\n' }, '["redis-0"]', 'host:port strings'],
    ['cache.redis.sentinels', { file: 'cache:\n  redis:\n    sentinels: "s:26379"\n' }, '"s:26379"', 'a list of host:port'],
    [
      'cache.redis.sentinels',
      { file: 'cache:\n  redis:\n    mode: sentinel\n', argv: ['--redis', 'redis://r'] },
      '[]',
      'at least one host:port when cache.redis.mode is sentinel',
    ],
    [
      'cache.redis.sentinelName',
      { file: 'cache:\n  redis:\n    mode: sentinel\n    sentinels: ["s:26379"]\n    sentinelName: ""\n', argv: ['--redis', 'redis://r'] },
      '""',
      'the name of the master',
    ],
    ['cache.redis.keyPrefix', { file: 'cache:\n  redis:\n    keyPrefix: "a b"\n' }, '"a b"', 'without whitespace'],
    ['cache.redis.commandTimeoutMs', { file: 'cache:\n  redis:\n    commandTimeoutMs: 0\n' }, '0', 'from 1 to'],
    ['cache.redis.connectTimeoutMs', { file: 'cache:\n  redis:\n    connectTimeoutMs: 0\n' }, '0', 'from 1 to'],
    ['cache.redis.lockWaitMs', { file: 'cache:\n  redis:\n    lockWaitMs: -1\n' }, '-1', 'from 0 to'],
    [
      'cache.redis.encryptionKeyId',
      { env: { TM_CACHE_REDIS_ENCRYPTION_KEYS: `k1:${HEX_KEY}`, TM_CACHE_REDIS_ENCRYPTION_KEY_ID: 'k9' } },
      '"k9"',
      'one of the ids of cache.redis.encryptionKeys: k1',
    ],
    ['cache.redis.encryptionKeyId', { env: { TM_CACHE_REDIS_ENCRYPTION_KEYS: `k1:${HEX_KEY}` } }, '""', 'one of the ids of cache.redis.encryptionKeys: k1'],
    ['cache.redis.encryptionKeyId', { env: { TM_CACHE_REDIS_ENCRYPTION_KEY_ID: 'k1' } }, '"k1"', 'empty, since cache.redis.encryptionKeys is empty'],
    ['server.managementPort', { argv: ['--port', '8000', '--management-port', '8000'] }, '8000', 'a port other than server.port (8000)'],
    ['server.port', { argv: ['--port', '9090'] }, '9090', 'a port other than server.managementPort (9090)'],
    [
      'cache.memory.maxBytes',
      { file: 'cache:\n  memory:\n    maxBytes: 1048576\n' },
      '1048576',
      'at least cache.memory.maxEntryBytes (8388608); lower that too',
    ],
  ];

  it.each(cases)('%s set by %j says what it received and what is allowed', (setting, sources, received, allowed) => {
    const error = configError(() => load(sources));
    const problem = error.problems.find((p) => p.startsWith(`${setting} `) || p.startsWith(`${setting}:`));
    expect(problem, error.message).toBeDefined();
    expect(problem).toContain(`received ${received}`);
    expect(problem!.slice(problem!.indexOf('; allowed: '))).toContain(allowed);
    expect(error.message).toContain(problem);
  });

  it('names the source of the value', () => {
    const path = writeConfig('server:\n  port: 70000\n');
    const fromFile = configError(() => loadConfig({ argv: ['--config', path], env: {} }));
    expect(fromFile.message).toContain(`server.port (from config file ${path}): received 70000`);
    expect(configError(() => load({ env: { TM_CACHE_PORT: '70000' } })).message).toContain('server.port (from TM_CACHE_PORT)');
  });

  it('reports every problem at once', () => {
    const error = configError(() => load({ file: 'upstream:\n  connections: 0\ncache:\n  strict: 2\n', argv: ['--port', '-1', '--log-level', 'loud'] }));
    expect(error.problems).toHaveLength(4);
    expect(error.message).toMatch(/^invalid configuration \(4 problems\):\n {2}- /);
  });

  it('accepts the edges of each range', () => {
    const config = load({
      file: [
        'server: { port: 0, managementPort: 0, shutdownGraceMs: 0 }',
        'upstream: { maxQueue: 0, connectTimeoutMs: 2147483647 }',
        'cache:',
        '  staleIfErrorMs: 0',
        '  freshness: { default: { ttlMs: 0, staleWhileRevalidateMs: 0 } }',
        '  memory: { maxBytes: 10, maxEntryBytes: 10 }',
        '  redis: { mode: cluster, nodes: ["redis-0:6379", "[::1]:7000"], lockWaitMs: 0 }',
      ].join('\n'),
      argv: ['--upstream', 'http://localhost:3000', '--redis', 'redis://localhost'],
      env: WITH_SECRET,
    });
    expect(config.server.port).toBe(0);
    expect(config.cache.redis.nodes).toEqual(['redis-0:6379', '[::1]:7000']);
  });
});

describe('a section the file leaves empty', () => {
  it("is reported as the file's, even when the environment sets a setting inside it", () => {
    const error = configError(() => load({ file: 'cache:\n  redis:\n', env: { TM_CACHE_REDIS: 'redis://r:6379' } }));
    expect(error.problems).toEqual([expect.stringMatching(/^cache\.redis \(from config file .*\): received null; allowed: a mapping with keys url, /)]);
  });
});

describe('redis modes', () => {
  const REDIS = ['--redis', 'redis://r'];
  it.each([
    ['cluster without nodes', 'mode: cluster', [], 'cache.redis.nodes', '[]', 'at least one host:port when cache.redis.mode is cluster'],
    ['cluster without nodes, with a URL', 'mode: cluster', REDIS, 'cache.redis.nodes', '[]', 'at least one host:port when cache.redis.mode is cluster'],
    ['sentinel without sentinels', 'mode: sentinel', [], 'cache.redis.sentinels', '[]', 'at least one host:port when cache.redis.mode is sentinel'],
    [
      'sentinel without sentinels, with a URL',
      'mode: sentinel',
      REDIS,
      'cache.redis.sentinels',
      '[]',
      'at least one host:port when cache.redis.mode is sentinel',
    ],
    [
      'sentinel without a master name',
      'mode: sentinel\n    sentinels: ["s:26379"]\n    sentinelName: ""',
      [],
      'cache.redis.sentinelName',
      '""',
      'the name of the master',
    ],
  ] as const)('%s is refused at load, naming the setting', (_, redis, argv, setting, received, allowed) => {
    const error = configError(() => load({ file: `cache:\n  redis:\n    ${redis}\n`, argv, env: WITH_SECRET }));
    expect(error.problems).toHaveLength(1);
    const [problem] = error.problems;
    expect(problem!.split(/[ :]/)[0]).toBe(setting);
    expect(problem).toContain(`received ${received}; allowed: `);
    expect(problem).toContain(allowed);
    expect(problem).toContain('(set by config file ');
  });

  it('reports a missing list and a missing master name together', () => {
    const error = configError(() => load({ file: 'cache:\n  redis:\n    mode: sentinel\n    sentinelName: ""\n', env: WITH_SECRET }));
    expect(error.problems.map((p) => p.split(/[ :]/)[0])).toEqual(['cache.redis.sentinels', 'cache.redis.sentinelName']);
  });

  it.each([
    [
      'a password in the URL and in cache.redis.password',
      ['mode: standalone'],
      { TM_CACHE_REDIS: 'redis://:url-pw@r:6379', TM_CACHE_REDIS_PASSWORD: 'env-pw' },
      'a URL without a password, since cache.redis.password gives one',
    ],
    [
      'a user in the URL and in cache.redis.username',
      ['mode: standalone'],
      { TM_CACHE_REDIS: 'redis://me:pw@r:6379', TM_CACHE_REDIS_USERNAME: 'you' },
      'a URL without a user name, since cache.redis.username gives one',
    ],
    [
      'credentials in the URL in cluster mode',
      ['mode: cluster', 'nodes: ["n:7000"]'],
      { TM_CACHE_REDIS: 'redis://:url-pw@r:6379' },
      'a URL without credentials when cache.redis.mode is cluster (the URL is not used there): set cache.redis.username and cache.redis.password',
    ],
    [
      'rediss:// in sentinel mode',
      ['mode: sentinel', 'sentinels: ["s:26379"]'],
      { TM_CACHE_REDIS: 'rediss://r:6379' },
      'a redis:// URL or none when cache.redis.mode is sentinel (the URL is not used there): set cache.redis.tls to true',
    ],
  ] as const)('%s is refused, naming the URL without showing its secret', (_, lines, env, allowed) => {
    const error = configError(() => load({ file: `cache:\n  redis:\n${lines.map((l) => `    ${l}\n`).join('')}`, env: { ...WITH_SECRET, ...env } }));
    expect(error.problems).toHaveLength(1);
    expect(error.problems[0]).toMatch(/^cache\.redis\.url \(from TM_CACHE_REDIS\): received /);
    expect(error.problems[0]).toContain(allowed);
    expect(error.message).not.toMatch(/url-pw|env-pw/);
  });

  it.each([
    [
      'a password by setting with a URL without one',
      'mode: standalone',
      { TM_CACHE_REDIS: 'rediss://r:6379', TM_CACHE_REDIS_USERNAME: 'tm', TM_CACHE_REDIS_PASSWORD: 'pw' },
    ],
    [
      'cluster with credentials and TLS by setting, and a bare URL',
      'mode: cluster\n    nodes: ["n:7000"]\n    tls: true',
      { TM_CACHE_REDIS: 'redis://r:6379', TM_CACHE_REDIS_PASSWORD: 'pw' },
    ],
    [
      'sentinel with both passwords',
      'mode: sentinel\n    sentinels: ["s:26379"]\n    sentinelUsername: sentinel-user',
      { TM_CACHE_REDIS_PASSWORD: 'pw', TM_CACHE_REDIS_SENTINEL_PASSWORD: 'spw' },
    ],
  ])('%s is accepted', (_, redis, env) => {
    expect(() => load({ file: `cache:\n  redis:\n    ${redis}\n`, env: { ...WITH_SECRET, ...env } })).not.toThrow();
  });

  it.each([
    ['standalone without a URL', 'mode: standalone'],
    ['cluster with seed nodes and no URL', 'mode: cluster\n    nodes: ["redis-0:6379"]'],
    ['sentinel with sentinels and no URL', 'mode: sentinel\n    sentinels: ["s:26379"]'],
  ])('%s is accepted', (_, redis) => {
    expect(() => load({ file: `cache:\n  redis:\n    ${redis}\n`, env: WITH_SECRET })).not.toThrow();
  });
});

describe('secrets', () => {
  it.each([
    [
      'hmacSecret too short, by env',
      { env: { TM_CACHE_HMAC_SECRET: 'hunter2hunter2' } },
      'hunter2hunter2',
      'identity.hmacSecret (from TM_CACHE_HMAC_SECRET): received <redacted>',
    ],
    ['hmacSecret of 31 bytes, by file', { file: `identity:\n  hmacSecret: "${'ef'.repeat(31)}"\n` }, 'ef'.repeat(31), 'identity.hmacSecret (from config file'],
    [
      'an encryption key of 31 bytes',
      { env: { TM_CACHE_REDIS_ENCRYPTION_KEYS: `k1:${'9a'.repeat(31)}`, TM_CACHE_REDIS_ENCRYPTION_KEY_ID: 'k1' } },
      '9a'.repeat(31),
      'cache.redis.encryptionKeys.k1 (from TM_CACHE_REDIS_ENCRYPTION_KEYS): received <redacted>',
    ],
    [
      'an encryption key YAML read as a number',
      { file: 'cache:\n  redis:\n    encryptionKeys: { k1: 1234567890123 }\n    encryptionKeyId: k1\n' },
      '1234567890123',
      'allowed: a quoted string of exactly 32 bytes',
    ],
    [
      'a malformed key list',
      { env: { TM_CACHE_REDIS_ENCRYPTION_KEYS: 'sekritsekrit' } },
      'sekritsekrit',
      'cache.redis.encryptionKeys (from TM_CACHE_REDIS_ENCRYPTION_KEYS): received <redacted>',
    ],
    ['a key list with a duplicated id', { env: { TM_CACHE_REDIS_ENCRYPTION_KEYS: `a:${HEX_KEY},a:${B64_KEY}` } }, HEX_KEY, 'key id "a" appears twice'],
    [
      'the password of a redis url',
      { env: { TM_CACHE_REDIS: 'redis://:s3cretpass@redis:6379/db' } },
      's3cretpass',
      'received "redis://<redacted>@redis:6379/db"',
    ],
    [
      'the credentials of an upstream url',
      { argv: ['--upstream', 'https://bob:s3cretpass@tm.example.com'] },
      's3cretpass',
      'received "https://<redacted>@tm.example.com"',
    ],
  ] as const)('%s is never shown', (_, sources, secret, expected) => {
    const error = configError(() => load(sources));
    expect(error.message).toContain(expected);
    expect(error.message).not.toContain(secret);
  });
});
