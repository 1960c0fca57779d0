#!/usr/bin/env node
/**
 * tm-cache serve | emulator | demo | healthcheck
 *
 * Flags and environment → validated config → start; SIGINT/SIGTERM drain and exit. An invalid
 * setting exits with code 2 and a message naming the setting, the value and what is allowed.
 */
// Each command imports what it runs when it runs (`--help` and `--version` load neither the
// emulator nor the proxy); only what every command shares, and the errors main() reports, is here.
import type { Logger } from 'pino';
import { COMMAND_HELP, DEMO_FLAGS, EMULATOR_FLAGS, USAGE, flagNames, isHelpFlag } from './cli-help.js';
import { VERSION } from './version.js';
import { parseFlags } from './config/flags.js';
import { ConfigError } from './config/errors.js';
import type { Config } from './config/schema.js';
import type { RunningProxy } from './serve.js';
import { keepTickObjectShape } from './tick-shape.js';

const EXIT_USAGE = 2;

async function makeLogger(level: Config['server']['logLevel']): Promise<Logger> {
  const [{ pino }, { LogSink }] = await Promise.all([import('pino'), import('./ops/log-sink.js')]);
  // A line per request (the access log) is written through a buffer, not sonic-boom: see
  // log-sink.ts. Flushed before exit (onSignals, `exit`).
  const destination = new LogSink(1);
  // An exit nobody planned (process.exit elsewhere, a crash): what is buffered still goes out.
  process.once('exit', () => destination.flushSync());
  return pino(
    {
      level,
      // Credentials never reach a log line, whatever a caller of the logger passes along.
      redact: { paths: ['req.headers.authorization', 'headers.authorization', 'authorization', '*.authorization'], censor: '[redacted]' },
    },
    destination,
  );
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
      () => exit(0, logger),
      (err: unknown) => {
        logger?.error({ err }, 'shutdown failed');
        exit(1, logger);
      },
    );
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));
}

async function runEmulator(argv: readonly string[]): Promise<void> {
  const flags = simpleFlags(argv, flagNames(EMULATOR_FLAGS));
  const { startEmulator } = await import('./emulator/server.js');
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

/** Exits once the log lines written so far are out (the logger writes asynchronously). */
function exit(code: number, logger?: Logger): void {
  if (logger === undefined) process.exit(code);
  logger.flush(() => process.exit(code));
}

async function runServe(argv: readonly string[]): Promise<void> {
  const [{ assertUpstream, loadConfigAsync }, { SignalledReloads }] = await Promise.all([import('./config/load.js'), import('./config/reload.js')]);
  const load = async (): Promise<Config> => {
    const loaded = await loadConfigAsync({ argv, env: process.env });
    assertUpstream(loaded);
    return loaded;
  };
  // SIGHUP re-reads the config file and environment (reload.ts); it never stops the process,
  // not even while start-up waits (for the file, for Redis): so it is handled from the first line.
  const reloads = new SignalledReloads(load);
  process.on('SIGHUP', () => reloads.request());
  const config = await load();
  const logger = await makeLogger(config.server.logLevel);
  const { startProxy } = await import('./serve.js');
  const proxy = await startProxy(config, { logger });
  logger.info({ url: proxy.url, management: proxy.managementUrl, upstream: config.upstream.url }, 'tm-cache serving');
  onSignals(() => proxy.close(), logger);
  reloads.started(proxy, logger);
}

/**
 * Exit 0 when this host's management port answers /healthz, 1 when it does not (the image's
 * HEALTHCHECK). The settings come from the same sources as `serve`, so the scheme and port follow
 * `server.tls` and `server.managementPort`; the certificate check is explained in health-check.ts.
 */
async function runHealthcheck(argv: readonly string[]): Promise<void> {
  const [{ loadConfig }, { checkHealth, healthCheckTarget }] = await Promise.all([import('./config/load.js'), import('./ops/health-check.js')]);
  // Any failure exits 1, a settings error too: a container runtime reserves exit code 2.
  const problem = await Promise.resolve()
    .then(() => checkHealth(healthCheckTarget(loadConfig({ argv, env: process.env }))))
    .catch((err: unknown) => (err instanceof Error ? err.message : String(err)));
  if (problem === undefined) return;
  console.error(`tm-cache healthcheck: ${problem}`);
  process.exit(1);
}

type DemoPortFlag = '--port' | '--management-port' | '--emulator-port';
/** The proxy's ports default to serve's (8080, 9090: server.port, server.managementPort); the emulator's is the demo's own. */
const DEMO_EMULATOR_PORT = 4010;
/** The environment variable that sets a demo port, where one does (the emulator's is the demo's own). */
const DEMO_PORT_ENV: Readonly<Partial<Record<DemoPortFlag, string>>> = { '--port': 'TM_CACHE_PORT', '--management-port': 'TM_CACHE_MANAGEMENT_PORT' };

/** A demo port and who chose it, for the message when it is taken. */
interface DemoPort {
  readonly port: number;
  readonly source: string;
}

/**
 * The demo's settings beneath the environment: an access log on stdout (log level info) and an
 * admin API with a token made for this run, so the status page can be opened at once. Whatever
 * TM_CACHE_* sets wins over these (TM_CACHE_CONFIG too), as for `serve`; only the upstream is the
 * demo's own, and the ports the demo's flags name.
 */
function demoEnvironment(env: NodeJS.ProcessEnv, adminToken: string): NodeJS.ProcessEnv {
  const set = Object.fromEntries(Object.entries(env).filter(([, value]) => value !== undefined && value !== ''));
  return { TM_CACHE_LOG_LEVEL: 'info', TM_CACHE_ADMIN_TOKEN: adminToken, ...set };
}

async function runDemo(argv: readonly string[]): Promise<void> {
  const flags = simpleFlags(argv, flagNames(DEMO_FLAGS));
  const [{ startEmulator }, { startProxy }, { loadConfig }, { randomBytes }] = await Promise.all([
    import('./emulator/server.js'),
    import('./serve.js'),
    import('./config/load.js'),
    import('node:crypto'),
  ]);
  const generatedToken = randomBytes(18).toString('base64url');
  const env = demoEnvironment(process.env, generatedToken);
  const proxyFlags = (['--port', '--management-port'] as const).flatMap((flag) => {
    const given = flags[flag.slice(2)];
    return given === undefined ? [] : [flag, String(intFlag(flags, flag.slice(2), 0, 0, 65535))];
  });
  const emulatorPort = intFlag(flags, 'emulator-port', DEMO_EMULATOR_PORT, 0, 65535);
  // Loaded before the emulator starts: a wrong TM_CACHE_* stops the demo at once, with serve's message.
  const configFor = (upstream: string): Config => loadConfig({ argv: ['--upstream', upstream, ...proxyFlags], env });
  configFor('http://127.0.0.1:1');
  const emulatorSource: DemoPort = { port: emulatorPort, source: flags['emulator-port'] === undefined ? '--emulator-port, its default' : '--emulator-port' };
  const emulator = await startEmulator({ host: '127.0.0.1', port: emulatorPort, seed: 42, scale: 'small' }).catch((err: unknown) =>
    Promise.reject(portInUse(err, [emulatorSource])),
  );
  const config = configFor(emulator.url);
  const ports: DemoPort[] = [
    { port: config.server.port, source: demoPortSource('--port', flags) },
    { port: config.server.managementPort, source: demoPortSource('--management-port', flags) },
  ];
  const logger = await makeLogger(config.server.logLevel);
  let proxy: RunningProxy;
  try {
    proxy = await startProxy(config, { logger });
  } catch (err) {
    await emulator.close();
    throw portInUse(err, ports);
  }
  const tokens = await emulatorTokens(emulator.url);
  printDemo(proxy, emulator.url, tokens, config, config.admin.token === generatedToken);
  onSignals(async () => {
    await proxy.close();
    await emulator.close();
  }, logger);
}

function demoPortSource(flag: DemoPortFlag, flags: Record<string, string>): string {
  if (flags[flag.slice(2)] !== undefined) return flag;
  const variable = DEMO_PORT_ENV[flag];
  if (variable !== undefined && (process.env[variable] ?? '') !== '') return variable;
  return `${flag}, its default`;
}

/**
 * The demo's first screen: where things are, how to open the status page (a sign-in link with
 * the token made for this run; a token of one's own is never printed), the tokens, and what to
 * try, each line saying whether its answer is cached.
 */
function printDemo(proxy: RunningProxy, emulatorUrl: string, tokens: EmulatorToken[], config: Config, tokenGenerated: boolean): void {
  const admin = tokens.find((t) => t.is_admin)!;
  const member = tokens.find((t) => !t.is_admin && t.project_ids.length > 0)!;
  const project = member.project_ids[0]!;
  const page = `${proxy.managementUrl}/`;
  // A fragment never reaches the server (nor its logs); the page reads it once and removes it.
  const signIn = tokenGenerated
    ? `${page}#token=${config.admin.token}   (one-click sign-in, admin token made for this run)`
    : `${page}   (sign in with your TM_CACHE_ADMIN_TOKEN)`;
  const adminToken = tokenGenerated ? config.admin.token : '$TM_CACHE_ADMIN_TOKEN';
  const viewer = config.admin.viewerToken === '' ? '' : '\n              a wall screen signs in with your TM_CACHE_ADMIN_VIEWER_TOKEN (read-only)';
  const access =
    config.log.access === 'off' || !['info', 'debug', 'trace'].includes(config.server.logLevel)
      ? `off (log.access ${config.log.access}, log level ${config.server.logLevel})`
      : `one JSON line per request on stdout, below (log.access ${config.log.access}; TM_CACHE_LOG_ACCESS=off silences it)`;
  console.log(`tm-cache demo
  proxy       ${proxy.url}/api/v1   (the instance's Read API, cached)
  emulator    ${emulatorUrl}/api/v1   (the instance; control plane under /__emulator/)
  status page ${signIn}${viewer}
  management  ${proxy.managementUrl}/metrics, /readyz, /admin/stats
  access log  ${access}
  settings    TM_CACHE_* variables and TM_CACHE_CONFIG apply, as for tm-cache serve

tokens:`);
  for (const t of tokens) console.log(`  ${t.token}  ${t.name}${t.is_admin ? ' (admin)' : ''} projects [${t.project_ids.join(',')}]`);
  console.log(`
try (Cache-Status says what happened):
  # cached: run it twice, the second answer is a hit from memory (Cache-Status: tm-cache; hit; ...; detail=memory)
  curl -si -H 'Authorization: Bearer ${member.token}' '${proxy.url}/api/v1/projects/${project}/runs?per_page=15&expands=users' | grep -iE '^(HTTP|cache-status|age|etag)'
  # cached, shared among verified admins: the second answer is a hit
  curl -si -H 'Authorization: Bearer ${admin.token}' '${proxy.url}/api/v1/users?expands=roles' | grep -iE '^(HTTP|cache-status)'
  # not cached: an unknown parameter is forwarded as it is (Cache-Status: tm-cache; fwd=bypass; detail=unknown-param)
  curl -si -H 'Authorization: Bearer ${member.token}' '${proxy.url}/api/v1/projects/${project}/runs?_=1' | grep -iE '^(HTTP|cache-status)'
  # not cached: no credential, answered 401 by tm-cache itself (the instance is not asked)
  curl -si '${proxy.url}/api/v1/user' | grep -iE '^HTTP'
  # the figures behind the status page (management port, admin API)
  curl -s -H "Authorization: Bearer ${adminToken}" '${proxy.managementUrl}/admin/stats'

Ctrl-C stops both.`);
}

async function main(argv: readonly string[]): Promise<void> {
  const [command, ...rest] = argv;
  if (command === 'serve' || command === 'emulator' || command === 'demo' || command === 'healthcheck') {
    // `tm-cache serve --version` as well as `tm-cache --version`: a newcomer tries both.
    const answer = rest.some(isHelpFlag) ? COMMAND_HELP[command] : rest.includes('--version') ? VERSION : undefined;
    if (answer !== undefined) {
      console.log(answer);
      return;
    }
  }
  switch (command) {
    case 'serve':
      return runServe(rest);
    case 'emulator':
      return runEmulator(rest);
    case 'demo':
      return runDemo(rest);
    case 'healthcheck':
      return runHealthcheck(rest);
    case undefined:
    case 'help':
    case '--help':
    case '-h':
      console.log(USAGE);
      return;
    case '--version':
      console.log(VERSION);
      return;
    default:
      console.error(`tm-cache: unknown command "${command}"\n\n${USAGE}`);
      process.exit(EXIT_USAGE);
  }
}

/** A port the demo needs is taken: say which, and how to choose others, instead of a bare EADDRINUSE. */
class PortInUseError extends Error {
  override readonly name = 'PortInUseError';
}

function portInUse(err: unknown, ports: readonly DemoPort[]): unknown {
  const { code, port } = err as { code?: string; port?: number };
  if (code !== 'EADDRINUSE') return err;
  const taken = ports.find((p) => p.port === port);
  const which = taken === undefined ? '' : ` (set by ${taken.source})`;
  return new PortInUseError(
    `port ${port ?? '?'}${which} is already in use. Choose other ports with --port P (proxy), --management-port M ` +
      '(management) and --emulator-port E (emulator); 0 picks a free port. E.g. tm-cache demo --port 18080 ' +
      '--management-port 19090 --emulator-port 14010 (through npm: npm run demo -- --port 18080 ...)',
  );
}

// Before any command runs: a served request's CPU depends on V8 keeping the tick objects' shape (tick-shape.ts).
keepTickObjectShape();
main(process.argv.slice(2)).catch((err: unknown) => {
  if (err instanceof PortInUseError) {
    console.error(`tm-cache demo: ${err.message}`);
    process.exit(1);
  }
  if (err instanceof ConfigError) {
    console.error(`tm-cache: ${err.message}`);
    process.exit(EXIT_USAGE);
  }
  console.error('tm-cache: failed to start:', err instanceof Error ? err.message : err);
  process.exit(1);
});
