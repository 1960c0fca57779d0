/**
 * What a scenario needs before it starts, checked in one place: a binary on the machine (wrk,
 * redis-server, nginx, varnishd), this checkout's build, another checkout to compare with. Each
 * check answers why it fails (with how to fix it), or undefined when all is there.
 */
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { UsageError } from './options.js';
import { findBinary } from './procs.js';

export type Binary = 'wrk' | 'redis-server' | 'redis-cli' | 'nginx' | 'varnishd' | 'taskset';

const PACKAGE: Record<Binary, string> = {
  wrk: 'wrk',
  'redis-server': 'redis-server',
  'redis-cli': 'redis-tools',
  nginx: 'nginx-light',
  varnishd: 'varnish',
  taskset: 'util-linux',
};

/** Why `name` cannot be run here, or undefined when it is found. */
export function missingBinary(name: Binary): string | undefined {
  return findBinary(name) === undefined ? `${name} not found (install: apt-get install ${PACKAGE[name]})` : undefined;
}

/** Why `dist/cli.js` of the checkout at `root` cannot be started, or undefined. */
export function missingBuild(root: string): string | undefined {
  return existsSync(join(root, 'dist/cli.js')) ? undefined : `${root} has no built dist/cli.js (npm run build there)`;
}

/**
 * The other checkout of an A/B scenario (`--base`), resolved; throws when it is not given or
 * lacks what the scenario loads from it (`dist/cli.js`, or a source file such as `src/cache/redis/codec.ts`):
 * a UsageError, reported without a stack.
 */
export function requireBase(base: string | undefined, needs = 'dist/cli.js'): string {
  if (base === undefined) {
    throw new UsageError(
      `--base <dir> (or BENCH_AB_BASE) must name another checkout with ${needs}, e.g.\n  git worktree add /tmp/base <commit> && (cd /tmp/base && npm ci && npm run build)`,
    );
  }
  const dir = resolve(base);
  if (!existsSync(join(dir, needs))) throw new UsageError(`--base ${dir} has no ${needs}${needs.startsWith('dist/') ? ' (npm run build there)' : ''}`);
  return dir;
}
