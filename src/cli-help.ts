/**
 * What `tm-cache --help`, `tm-cache <command> --help` and `--version` print. The flags of `serve`
 * are derived from the schema (every setting that names a flag), so a new flag cannot be missing
 * from its help; the small subcommands list theirs here, next to their defaults.
 */
import { CONFIG_FILE_ENV, CONFIG_FILE_FLAG, CONFIG_OVERRIDES } from './config/load.js';

export interface FlagHelp {
  /** `--port`. */
  readonly flag: string;
  /** What the value is, e.g. `P`. */
  readonly value: string;
  readonly text: string;
}

/** One line per serve flag; a setting without a phrase here is described by its path. */
const SERVE_PHRASES: Readonly<Record<string, { value: string; text: string }>> = {
  'upstream.url': { value: 'URL', text: 'base URL of the instance, e.g. https://tm.example.com (required)' },
  'server.host': { value: 'H', text: 'address of the proxy port (default 127.0.0.1; 0.0.0.0 in the image)' },
  'server.port': { value: 'P', text: 'proxy port (default 8080; 0 picks a free port)' },
  'server.managementHost': { value: 'H', text: 'address of the management port (default 127.0.0.1)' },
  'server.managementPort': { value: 'M', text: 'management port: /healthz, /readyz, /metrics (default 9090)' },
  'server.logLevel': { value: 'L', text: 'fatal, error, warn, info, debug, trace or silent (default info)' },
  'server.tls.certFile': { value: 'F', text: 'PEM certificate chain: both ports serve HTTPS (default: plain HTTP); re-read on SIGHUP and when it changes' },
  'server.tls.keyFile': { value: 'F', text: 'PEM private key of that certificate (both files or neither)' },
  'server.tls.clientCaFile': { value: 'F', text: 'PEM CA(s) of client certificates, then required on the proxy port (default: none asked)' },
  'cache.redis.url': {
    value: 'URL',
    text: 'redis:// or rediss:// URL of the shared tier (default: memory only); needs TM_CACHE_HMAC_SECRET or encryption keys',
  },
};

export const SERVE_FLAGS: readonly FlagHelp[] = [
  ...CONFIG_OVERRIDES.flatMap((o) => {
    if (o.flag === undefined) return [];
    const phrase = SERVE_PHRASES[o.setting] ?? { value: 'VALUE', text: `sets ${o.setting}` };
    const env = o.env === undefined ? '' : ` [${o.env}]`;
    return [{ flag: o.flag, value: phrase.value, text: `${phrase.text}${env}` }];
  }),
  { flag: CONFIG_FILE_FLAG, value: 'FILE', text: `YAML file of settings over the defaults (config/default.yaml) [${CONFIG_FILE_ENV}]` },
];

/** Settings an environment variable sets but no flag. */
const ENV_ONLY = CONFIG_OVERRIDES.filter((o) => o.flag === undefined && o.env !== undefined);

export const EMULATOR_FLAGS: readonly FlagHelp[] = [
  { flag: '--host', value: 'H', text: 'address to listen on (default 127.0.0.1)' },
  { flag: '--port', value: 'P', text: 'port to listen on (default 4010; 0 picks a free port)' },
  { flag: '--seed', value: 'N', text: 'seed of the generated dataset (default 42; same seed and scale, same data)' },
  { flag: '--scale', value: 'S', text: 'dataset size: small, medium or large (default small)' },
];

export const DEMO_FLAGS: readonly FlagHelp[] = [
  { flag: '--port', value: 'P', text: 'proxy port (default 8080; 0 picks a free port)' },
  { flag: '--management-port', value: 'M', text: 'management port: /healthz, /readyz, /metrics (default 9090; 0 picks a free port)' },
  { flag: '--emulator-port', value: 'E', text: 'port of the built-in emulator (default 4010; 0 picks a free port)' },
];

export const flagNames = (flags: readonly FlagHelp[]): string[] => flags.map((f) => f.flag);

const HELP_FLAG_LINES: readonly FlagHelp[] = [{ flag: '-h, --help', value: '', text: 'print this help and exit' }];

/** Two aligned columns, indented. */
function columns(rows: readonly (readonly [string, string])[]): string {
  const width = Math.max(...rows.map(([left]) => left.length));
  return rows.map(([left, right]) => `  ${left.padEnd(width)}  ${right}`).join('\n');
}

function flagLines(flags: readonly FlagHelp[]): string {
  return columns([...flags, ...HELP_FLAG_LINES].map((f) => [f.value === '' ? f.flag : `${f.flag} ${f.value}`, f.text]));
}

export const COMMAND_HELP: Readonly<Record<'serve' | 'emulator' | 'demo' | 'healthcheck', string>> = {
  serve: `Usage: tm-cache serve --upstream URL [flags]

Runs the caching proxy in front of the instance at URL. Every flag is also an environment
variable (in brackets); every other setting is in config/default.yaml and can be set with --config.
Precedence, lowest first: defaults < --config FILE < environment < flags.

Flags (--flag VALUE or --flag=VALUE):
${flagLines(SERVE_FLAGS)}

Environment variables without a flag (secrets among them: never on a command line):
${columns(ENV_ONLY.map((o) => [o.env!, o.setting]))}`,
  emulator: `Usage: tm-cache emulator [flags]

Serves a deterministic emulator of the Read API under /api/v1 and prints its tokens; its control
plane (stats, faults, mutations) is under /__emulator/.

Flags (--flag VALUE or --flag=VALUE):
${flagLines(EMULATOR_FLAGS)}`,
  demo: `Usage: tm-cache demo [flags]

Starts the emulator and the proxy in front of it, and prints the URLs, a sign-in link to the status
page (with an admin token made for the run), the tokens and curl lines to try; the access log goes
to stdout. TM_CACHE_* variables and TM_CACHE_CONFIG apply as for serve, over the demo's own
settings (log level info, the generated admin token). When a port is taken, choose others with
the flags below (0 picks a free port).

Flags (--flag VALUE or --flag=VALUE):
${flagLines(DEMO_FLAGS)}`,
  healthcheck: `Usage: tm-cache healthcheck [flags]

Asks this host's management port for /healthz and exits 0 when it answers 200, 1 otherwise (the
container image's HEALTHCHECK). It reads the settings serve reads (defaults < --config FILE <
environment < flags), so the scheme follows server.tls and server.tls.management, and the port
server.managementPort; a wildcard management host is reached through 127.0.0.1. Over HTTPS the
server must present the very certificate of server.tls.certFile (the host name is not checked).

Flags: those of tm-cache serve (tm-cache serve --help).`,
};

export const USAGE = `Usage: tm-cache <command> [flags]

Commands:
  serve        run the caching proxy in front of an instance (tm-cache serve --upstream URL)
  emulator     run the built-in emulator of the Read API
  demo         run the emulator and the proxy in front of it, and print what to try
  healthcheck  exit 0 when this host's management port answers /healthz, 1 otherwise

Options:
  -h, --help      print this help, or a command's flags with tm-cache <command> --help
  --version       print the version of tm-cache

Run tm-cache <command> --help for the flags of a command.`;

export const isHelpFlag = (arg: string) => arg === '--help' || arg === '-h';
