/**
 * Rules that involve more than one setting, which the schema cannot phrase well. They run only
 * when every setting is valid on its own, so they may trust types and ranges.
 * Of two settings in conflict, a rule blames the one somebody set, not a default they never saw.
 */
import type { Config } from './schema.js';
import { describeProblem, originOf, type Origin } from './validate.js';

export function relationProblems(config: Config, origin: Origin): string[] {
  return [
    ...memoryProblems(config, origin),
    ...portProblems(config, origin),
    ...keyProblems(config, origin),
    ...redisModeProblems(config, origin),
    ...redisCredentialProblems(config, origin),
    ...sharedSecretProblems(config, origin),
    ...budgetProblems(config, origin),
    ...tlsProblems(config, origin),
    ...viewerTokenProblems(config, origin),
  ];
}

function memoryProblems({ cache: { memory } }: Config, origin: Origin): string[] {
  if (memory.maxEntryBytes <= memory.maxBytes) return [];
  return [
    originOf('cache.memory.maxEntryBytes', origin) === undefined
      ? describeProblem('cache.memory.maxBytes', memory.maxBytes, `at least cache.memory.maxEntryBytes (${memory.maxEntryBytes}); lower that too`, origin)
      : describeProblem('cache.memory.maxEntryBytes', memory.maxEntryBytes, `at most cache.memory.maxBytes (${memory.maxBytes})`, origin),
  ];
}

function portProblems({ server: { port, managementPort } }: Config, origin: Origin): string[] {
  if (port === 0 || port !== managementPort) return [];
  return [
    originOf('server.managementPort', origin) === undefined
      ? describeProblem('server.port', port, `a port other than server.managementPort (${managementPort}), or 0`, origin)
      : describeProblem('server.managementPort', managementPort, `a port other than server.port (${port}), or 0`, origin),
  ];
}

function keyProblems({ cache: { redis } }: Config, origin: Origin): string[] {
  const keyIds = Object.keys(redis.encryptionKeys);
  const keyId = 'cache.redis.encryptionKeyId';
  if (keyIds.length > 0 && !keyIds.includes(redis.encryptionKeyId)) {
    return [describeProblem(keyId, redis.encryptionKeyId, `one of the ids of cache.redis.encryptionKeys: ${keyIds.join(', ')}`, origin)];
  }
  if (keyIds.length === 0 && redis.encryptionKeyId !== '') {
    return [
      describeProblem(
        keyId,
        redis.encryptionKeyId,
        'empty, since cache.redis.encryptionKeys is empty (set TM_CACHE_REDIS_ENCRYPTION_KEYS or encryptionKeys)',
        origin,
      ),
    ];
  }
  return [];
}

/**
 * Cluster and sentinel mode find their servers through `nodes` and `sentinels`, with or without a
 * URL (the proxy starts the Redis tier in any mode but standalone-without-URL), so they are needed
 * whenever the mode is chosen: caught here, at start, rather than by the Redis client later.
 */
function redisModeProblems({ cache: { redis } }: Config, origin: Origin): string[] {
  const problems: string[] = [];
  const modeSource = originOf('cache.redis.mode', origin);
  const when = `when cache.redis.mode is ${redis.mode}${modeSource === undefined ? '' : ` (set by ${modeSource})`}`;
  if (redis.mode === 'cluster' && redis.nodes.length === 0) {
    problems.push(describeProblem('cache.redis.nodes', redis.nodes, `at least one host:port ${when}`, origin));
  }
  if (redis.mode === 'sentinel' && redis.sentinels.length === 0) {
    problems.push(describeProblem('cache.redis.sentinels', redis.sentinels, `at least one host:port ${when}`, origin));
  }
  if (redis.mode === 'sentinel' && redis.sentinelName === '') {
    problems.push(describeProblem('cache.redis.sentinelName', redis.sentinelName, `the name of the master the sentinels watch ${when}`, origin));
  }
  return problems;
}

/**
 * Credentials and TLS are said once: in standalone mode by the URL or by the settings, not both
 * (which would win is no one's guess to make); in cluster and sentinel mode the URL is not used,
 * so a URL carrying them would be dropped silently: the settings say them there.
 */
function redisCredentialProblems({ cache: { redis } }: Config, origin: Origin): string[] {
  if (redis.url === '') return [];
  const url = new URL(redis.url);
  const problems: string[] = [];
  // Messages show the URL with its credentials hidden.
  const shown = (allowed: string): string => describeProblem('cache.redis.url', redis.url, allowed, origin);
  if (redis.mode === 'standalone') {
    if (url.password !== '' && redis.password !== '') problems.push(shown('a URL without a password, since cache.redis.password gives one (say it once)'));
    if (url.username !== '' && redis.username !== '') problems.push(shown('a URL without a user name, since cache.redis.username gives one (say it once)'));
    return problems;
  }
  if (url.username !== '' || url.password !== '') {
    problems.push(
      shown(
        `a URL without credentials when cache.redis.mode is ${redis.mode} (the URL is not used there): set cache.redis.username and cache.redis.password (TM_CACHE_REDIS_PASSWORD)`,
      ),
    );
  }
  if (url.protocol === 'rediss:') {
    problems.push(shown(`a redis:// URL or none when cache.redis.mode is ${redis.mode} (the URL is not used there): set cache.redis.tls to true for TLS`));
  }
  return problems;
}

/** The Redis tier runs: a URL, or cluster or sentinel mode (which find their servers without one). */
export function usesRedis({ cache: { redis } }: Config): boolean {
  return redis.url !== '' || redis.mode !== 'standalone';
}

/** How to make a secret, as the start-up message and the docs show it. */
export const MAKE_SECRET_HINT =
  'set TM_CACHE_HMAC_SECRET="$(openssl rand -base64 32)" (identity.hmacSecret), the same on every replica, ' +
  'or encryption keys: TM_CACHE_REDIS_ENCRYPTION_KEYS="k1:$(openssl rand -base64 32)" and TM_CACHE_REDIS_ENCRYPTION_KEY_ID=k1 ' +
  '(cache.redis.encryptionKeys, cache.redis.encryptionKeyId)';

/**
 * A shared Redis needs a secret Redis does not hold: every value read back from it is trusted
 * because it verifies under a key derived from `identity.hmacSecret` (or is sealed with an
 * encryption key). A secret generated and kept in Redis could be read and used to forge values by
 * anyone who can read Redis, and was lost with a FLUSHDB (replicas then split). Names neither
 * the URL nor any secret.
 */
function sharedSecretProblems(config: Config, origin: Origin): string[] {
  if (!usesRedis(config) || config.identity.hmacSecret !== '' || Object.keys(config.cache.redis.encryptionKeys).length > 0) return [];
  const source = originOf('cache.redis.url', origin) ?? originOf('cache.redis.mode', origin);
  const why = `a shared Redis${source === undefined ? '' : ` (set by ${source})`} needs a secret that Redis does not hold`;
  return [`identity.hmacSecret or cache.redis.encryptionKeys: neither is set, and ${why}: ${MAKE_SECRET_HINT}`];
}

function budgetProblems({ upstream: { budget } }: Config, origin: Origin): string[] {
  if (budget.requestsPerSecond > 0 || budget.burst === 0) return [];
  return [
    describeProblem(
      'upstream.budget.burst',
      budget.burst,
      "0 when upstream.budget.requestsPerSecond is 0 (a learned budget's burst follows its rate: one second's worth); set requestsPerSecond to fix the budget",
      origin,
    ),
  ];
}

/**
 * TLS needs a certificate and its key: one without the other is a mistake (a half-mounted
 * Secret), never a reason to serve plain HTTP. A client CA means nothing without TLS.
 */
function tlsProblems({ server: { tls } }: Config, origin: Origin): string[] {
  if (tls.certFile !== '' && tls.keyFile === '')
    return [
      describeProblem(
        'server.tls.keyFile',
        tls.keyFile,
        "the path of the certificate's private key, since server.tls.certFile is set (both files or neither)",
        origin,
      ),
    ];
  if (tls.certFile === '' && tls.keyFile !== '')
    return [describeProblem('server.tls.certFile', tls.certFile, 'the path of the certificate for server.tls.keyFile (both files or neither)', origin)];
  if (tls.certFile === '' && tls.clientCaFile !== '') {
    return [describeProblem('server.tls.clientCaFile', tls.clientCaFile, 'empty without TLS: set server.tls.certFile and server.tls.keyFile too', origin)];
  }
  return [];
}

/**
 * The viewer token is a read-only view of an admin API that is on: without admin.token the API
 * answers 404 to everything, and a viewer token equal to the admin token would make every viewer
 * an admin. Named without either value (both are secrets).
 */
function viewerTokenProblems({ admin }: Config, origin: Origin): string[] {
  if (admin.viewerToken === '') return [];
  const secret = { type: 'string', secret: true } as const;
  if (admin.token === '') {
    return [
      describeProblem(
        'admin.viewerToken',
        admin.viewerToken,
        'empty while admin.token is empty (the admin API is off): set admin.token (TM_CACHE_ADMIN_TOKEN) too',
        origin,
        secret,
      ),
    ];
  }
  if (admin.viewerToken === admin.token) {
    return [
      describeProblem('admin.viewerToken', admin.viewerToken, "a token other than admin.token (a viewer must not hold the admin's token)", origin, secret),
    ];
  }
  return [];
}
