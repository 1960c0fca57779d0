/**
 * `--name value` / `--name=value` flags, read with node:util `parseArgs`, for `serve` (through
 * loadConfig) and the small subcommands of the CLI.
 *
 * parseArgs runs non-strict and returns its tokens, so that every problem is reported at once and
 * phrased like the rest of the configuration (naming the flag and what is allowed), instead of
 * stopping at the first one in Node's wording. Flags only: a positional argument is a problem.
 */
import { parseArgs } from 'node:util';

export interface ParsedFlags {
  /** Flag (`--port`) → raw value, in order; of a repeated flag the last one wins. */
  readonly values: ReadonlyMap<string, string>;
  readonly problems: readonly string[];
}

type Token = NonNullable<ReturnType<typeof parseArgs>['tokens']>[number];

/** Reads `argv` against the allowed flags (`['--port', ...]`), each of which takes a value. */
export function parseFlags(argv: readonly string[], flags: readonly string[]): ParsedFlags {
  const options = Object.fromEntries(flags.map((flag) => [flag.slice(2), { type: 'string' as const }]));
  const { tokens } = parseArgs({ args: [...argv], options, strict: false, allowPositionals: true, tokens: true });
  const allowed = `${flags.join(', ')} (as --flag value or --flag=value)`;
  const values = new Map<string, string>();
  const problems: string[] = [];
  let previousFailed = false;
  for (const token of tokens) {
    // The word right after a failed flag is its value (`--ports 1`) or what it swallowed: no news.
    if (token.kind === 'positional' && previousFailed) {
      previousFailed = false;
      continue;
    }
    const problem = problemOf(token, flags, allowed);
    if (problem !== undefined) problems.push(problem);
    else if (token.kind === 'option') values.set(token.rawName, token.value!.trim());
    previousFailed = problem !== undefined;
  }
  return { values, problems };
}

function problemOf(token: Token, flags: readonly string[], allowed: string): string | undefined {
  if (token.kind === 'positional') return `unexpected argument ${JSON.stringify(token.value)}; allowed: ${allowed}`;
  if (token.kind === 'option-terminator') return `unexpected argument "--"; allowed: ${allowed}`;
  const flag = token.rawName;
  if (!flags.includes(flag)) return `unknown flag ${flag}; allowed: ${allowed}`;
  // parseArgs takes whatever follows as the value, even the next flag (`--port --host x`).
  if (token.value === undefined || (!token.inlineValue && token.value.startsWith('--'))) {
    return `flag ${flag} needs a value: ${flag} VALUE or ${flag}=VALUE`;
  }
  return undefined;
}
