#!/usr/bin/env node
/**
 * Builds the status page next to the compiled server (part of `npm run build`):
 *   src/ops/status-page/page.ts    → dist/ops/status-page/page.js   (tsc with the page's own tsconfig)
 *   src/ops/status-page/index.html → dist/ops/status-page/index.html
 *   src/ops/status-page/page.css   → dist/ops/status-page/page.css
 * dist/ops/status-page.js reads the three at start-up, inlines the style and the script and allows
 * them by hash; the production image copies dist/ and has no TypeScript, so all three must be here.
 */
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const SOURCE = join(ROOT, 'src/ops/status-page');
const TARGET = join(ROOT, 'dist/ops/status-page');
const COPIED = ['index.html', 'page.css'];

const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
const compiled = spawnSync(process.execPath, [tsc, '-p', join(SOURCE, 'tsconfig.json')], { stdio: 'inherit' });
if (compiled.status !== 0) {
  console.error(`build-status-page: tsc failed on ${join(SOURCE, 'page.ts')}`);
  process.exit(compiled.status ?? 1);
}
mkdirSync(TARGET, { recursive: true });
for (const name of COPIED) copyFileSync(join(SOURCE, name), join(TARGET, name));
