/**
 * The built command as the container image starts it (`node dist/cli.js serve`), for tests that
 * need a real process: signals, exit codes, what it writes. `npm test` builds dist/ first.
 */
import { spawn, type ChildProcess } from 'node:child_process';

export const CLI = new URL('../../dist/cli.js', import.meta.url).pathname;

export interface Serving {
  readonly child: ChildProcess;
  readonly url: string;
  readonly management: string;
  /** Everything written on stdout and stderr so far. */
  output(): string;
}

/** A `serve` process just spawned: not yet serving, its output collected from the first byte. */
export interface Spawned {
  readonly child: ChildProcess;
  output(): string;
}

export function spawnServe(env: Record<string, string>, args: readonly string[] = []): Spawned {
  const child = spawn(process.execPath, [CLI, 'serve', ...args], { env: { PATH: process.env['PATH'] ?? '', ...env } });
  let output = '';
  child.stderr.on('data', (d) => (output += d));
  child.stdout.on('data', (d) => (output += d));
  return { child, output: () => output };
}

/** Starts `serve` and resolves once it logs that it is serving, with the URLs it listens on. */
export async function startServe(env: Record<string, string>, args: readonly string[] = []): Promise<Serving> {
  return serving(spawnServe(env, args));
}

/** Resolves once a spawned `serve` logs that it is serving (it may have done so already). */
export async function serving({ child, output }: Spawned): Promise<Serving> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      // A serve that never said it was serving must not outlive the test that started it.
      child.kill('SIGKILL');
      reject(new Error(`serve did not start:\n${output()}`));
    }, 15_000);
    const onExit = (code: number | null, signal: string | null) => reject(new Error(`serve exited with ${code ?? signal}:\n${output()}`));
    child.once('exit', onExit);
    const check = (): void => {
      const line = output()
        .split('\n')
        .find((l) => l.includes('tm-cache serving'));
      if (!line) return;
      clearTimeout(timer);
      child.stdout!.off('data', check);
      child.off('exit', onExit);
      const { url, management } = JSON.parse(line) as { url: string; management: string };
      resolve({ child, url, management, output });
    };
    child.stdout!.on('data', check);
    check();
  });
}
