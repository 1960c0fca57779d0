#!/usr/bin/env node
/**
 * tm-cache serve | emulator | demo
 *
 * Flags and environment → validated config → start; SIGINT/SIGTERM drain and exit. An invalid
 * setting exits with code 2 and a message naming the setting, the value and what is allowed.
 */
import { pino, type Logger } from 'pino';
import { parseFlags } from './config/flags.js';
import { ConfigError, assertUpstream, loadConfig } from './config/load.js';
import type { Config } from './config/schema.js';
import { startEmulator } from './emulator/server.js';
import { startProxy, type RunningProxy } from './proxy/server.js';

const USAGE = `Usage:
  tm-cache serve --upstream URL [--host H] [--port P] [--management-port M] [--redis URL] [--config FILE] [--log-level L]
  tm-cache emulator [--host 127.0.0.1] [--port 4010] [--seed 42] [--scale small|medium|large]
  tm-cache demo [--port 8080] [--emulator-port 4010]

Every serve flag is also an environment variable (TM_CACHE_UPSTREAM, TM_CACHE_HOST, TM_CACHE_PORT,
TM_CACHE_MANAGEMENT_PORT, TM_CACHE_REDIS, TM_CACHE_CONFIG, TM_CACHE_IDENTITY_TTL_MS, ...); every other
setting lives in config/default.yaml and can be overridden with --config FILE.`;

const EXIT_USAGE = 2;

function makeLogger(level: Config['server']['logLevel']): Logger {
  return pino({
    level,
    // Credentials never reach a log line, whatever a caller of the logger passes along.
    redact: { paths: ['req.headers.authorization', 'headers.authorization', 'authorization', '*.authorization'], censor: '[redacted]' },
  });
}

/** `--name value` / `--name=value` flags of the small subcommands (emulator, demo), by name without `--`. */
function simpleFlags(argv: readonly string[], allowed: readonly string[]): Record<string, string> {
  const { values, problems } = parseFlags(argv, allowed);
  if (problems.length > 0) throw ConfigError.fromProblems(problems);
  return Object.fromEntries([...values].map(([flag, value]) => [flag.slice(2), value]));
}

function intFlag(flags: Record<string, string>, name: string, fallback: number, min: number, max: number): number {
  const raw = flags[name];
  if (raw === undefined) return fallback;
  const n = /^\d+$/.test(raw) ? Number(raw) : NaN;
  if (!(n >= min && n <= max)) throw new ConfigError(`--${name}: got "${raw}", expected an integer from ${min} to ${max}`);
  return n;
}

function scaleFlag(flags: Record<string, string>): 'small' | 'medium' | 'large' {
  const scale = flags['scale'] ?? 'small';
  if (scale !== 'small' && scale !== 'medium' && scale !== 'large') {
    throw new ConfigError(`--scale: got "${scale}", expected one of small, medium, large`);
  }
  return scale;
}

function onSignals(close: () => Promise<void>, logger?: Logger): void {
  let closing = false;
  const stop = (signal: string) => {
    if (closing) process.exit(1); // a second signal: stop waiting
    closing = true;
    logger?.info({ signal }, 'shutting down');
    close().then(
      () => process.exit(0),
      (err: unknown) => {
        logger?.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));
}

async function runEmulator(argv: readonly string[]): Promise<void> {
  const flags = simpleFlags(argv, ['--host', '--port', '--seed', '--scale']);
  const emulator = await startEmulator({
    host: flags['host'] ?? '127.0.0.1',
    port: intFlag(flags, 'port', 4010, 0, 65535),
    seed: intFlag(flags, 'seed', 42, 0, 2 ** 31 - 1),
    scale: scaleFlag(flags),
  });
  const tokens = await emulatorTokens(emulator.url);
  console.log(`tm-cache emulator listening on ${emulator.url} (API under ${emulator.url}/api/v1)`);
  console.log('tokens:');
  for (const t of tokens) console.log(`  ${t.token}  user ${t.user_id} ${t.name}${t.is_admin ? ' (admin)' : ''} projects [${t.project_ids.join(',')}]`);
  onSignals(() => emulator.close());
}

interface EmulatorToken {
  token: string;
  user_id: number;
  name: string;
  is_admin: boolean;
  project_ids: number[];
}

async function emulatorTokens(url: string): Promise<EmulatorToken[]> {
  const res = await fetch(`${url}/__emulator/tokens`);
  return (await res.json()) as EmulatorToken[];
}

async function runServe(argv: readonly string[]): Promise<void> {
  const config = loadConfig({ argv, env: process.env });
  assertUpstream(config);
  const logger = makeLogger(config.server.logLevel);
  const proxy = await startProxy(config, { logger });
  logger.info({ url: proxy.url, management: proxy.managementUrl, upstream: config.upstream.url }, 'tm-cache serving');
  onSignals(() => proxy.close(), logger);
}

async function runDemo(argv: readonly string[]): Promise<void> {
  const flags = simpleFlags(argv, ['--port', '--emulator-port', '--management-port']);
  const emulator = await startEmulator({ host: '127.0.0.1', port: intFlag(flags, 'emulator-port', 4010, 0, 65535), seed: 42, scale: 'small' });
  const config = loadConfig({
    argv: ['--upstream', emulator.url, '--port', String(intFlag(flags, 'port', 8080, 0, 65535)),
      '--management-port', String(intFlag(flags, 'management-port', 9090, 0, 65535))],
    env: { TM_CACHE_LOG_LEVEL: process.env['TM_CACHE_LOG_LEVEL'] ?? 'warn' },
  });
  const logger = makeLogger(config.server.logLevel);
  let proxy: RunningProxy;
  try {
    proxy = await startProxy(config, { logger });
  } catch (err) {
    await emulator.close();
    throw err;
  }
  const tokens = await emulatorTokens(emulator.url);
  printDemo(proxy, emulator.url, tokens);
  onSignals(async () => {
    await proxy.close();
    await emulator.close();
  }, logger);
}

function printDemo(proxy: RunningProxy, emulatorUrl: string, tokens: EmulatorToken[]): void {
  const admin = tokens.find((t) => t.is_admin)!;
  const member = tokens.find((t) => !t.is_admin && t.project_ids.length > 0)!;
  const project = member.project_ids[0]!;
  console.log(`tm-cache demo
  proxy       ${proxy.url}/api/v1   (management: ${proxy.managementUrl}/metrics)
  emulator    ${emulatorUrl}/api/v1   (the instance; control plane under /__emulator/)

tokens:`);
  for (const t of tokens) console.log(`  ${t.token}  ${t.name}${t.is_admin ? ' (admin)' : ''} projects [${t.project_ids.join(',')}]`);
  console.log(`
try (run each twice: the second answer is a cache hit, see Cache-Status):
  curl -si -H 'Authorization: Bearer ${member.token}' '${proxy.url}/api/v1/projects/${project}/runs?per_page=15&expands=users' | grep -iE '^(HTTP|cache-status|age|etag)'
  curl -si -H 'Authorization: Bearer ${admin.token}' '${proxy.url}/api/v1/users?expands=roles' | grep -iE '^(HTTP|cache-status)'
  curl -si '${proxy.url}/api/v1/user'     # no credential: the instance's own 401, never cached

Ctrl-C stops both.`);
}

async function main(argv: readonly string[]): Promise<void> {
  const [command, ...rest] = argv;
  switch (command) {
    case 'serve':
      return runServe(rest);
    case 'emulator':
      return runEmulator(rest);
    case 'demo':
      return runDemo(rest);
    case undefined:
    case 'help':
    case '--help':
    case '-h':
      console.log(USAGE);
      return;
    default:
      console.error(`tm-cache: unknown command "${command}"\n\n${USAGE}`);
      process.exit(EXIT_USAGE);
  }
}

main(process.argv.slice(2)).catch((err: unknown) => {
  if (err instanceof ConfigError) {
    console.error(`tm-cache: ${err.message}`);
    process.exit(EXIT_USAGE);
  }
  console.error('tm-cache: failed to start:', err instanceof Error ? err.message : err);
  process.exit(1);
});
