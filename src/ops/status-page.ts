/**
 * The status page served at `GET /` on the management port: one self-contained HTML document
 * (inline CSS and JS, no CDN, no web font) that asks for the admin token, keeps it in
 * sessionStorage and polls `GET /admin/stats` every 2 s (the JSON shape is in docs/operating.md's admin
 * API section).
 *
 * Its parts are real files in ./status-page/: index.html (the document), page.css and page.ts (the
 * browser code, strictly typed against the DOM with its own tsconfig). `npm run build` compiles
 * page.ts to dist/ops/status-page/page.js and copies the other two beside it; this module reads
 * them once, at load, from the folder next to itself, and inlines the style and the script in
 * place of the document's <link rel="stylesheet"> and <script src> tags.
 *
 * Every string from the JSON reaches the DOM through `textContent` or an SVG attribute set with
 * `setAttribute`, never through innerHTML, so an operation name or an upstream error message is
 * text, whatever it contains. The page is sent with a strict Content-Security-Policy that allows
 * exactly the one inline <script> and the one inline <style> by their SHA-256 hashes (computed
 * here, at load, from the very strings that are served), and nothing else: no other script, no
 * style attribute, no external fetch but same-origin XHR to /admin/stats.
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type * as ts from 'typescript';
// A type only: the module itself is loaded on demand (source mode), never in the image.
type TypeScript = typeof ts;

/** dist/ops/status-page/ once built; src/ops/status-page/ when run from source (vitest, tsx). */
const PAGE_DIR = new URL('./status-page/', import.meta.url);

/** The tags in index.html that stand for the files inlined in their place. */
const STYLE_TAG = '<link rel="stylesheet" href="page.css">';
const SCRIPT_TAG = '<script src="page.js"></script>';

function readPageFile(name: string): string {
  return readFileSync(new URL(name, PAGE_DIR), 'utf8');
}

/**
 * The browser code as served: page.js as `npm run build` compiled it; or, from source where
 * there is none, page.ts transpiled here (the same output: a classic script).
 */
function readPageScript(): string {
  if (existsSync(new URL('page.js', PAGE_DIR))) return readPageFile('page.js');
  return transpiledFromSource();
}

/**
 * page.ts transpiled with the page's own tsconfig, as tsc emits it. Only this path loads
 * TypeScript, a devDependency the production image lacks. Loading it and transpiling take about a
 * second, which every test file that starts a proxy would pay, so the output is kept in
 * node_modules/.cache/ (where tools keep theirs, writable only by whoever installed the project)
 * under the hash of everything it depends on: TypeScript's version, the tsconfig, page.ts.
 */
function transpiledFromSource(): string {
  const require = createRequire(import.meta.url);
  const typescriptManifest = require.resolve('typescript/package.json');
  const tsconfig = readPageFile('tsconfig.json');
  const source = readPageFile('page.ts');
  const inputs = createHash('sha256').update(readFileSync(typescriptManifest)).update('\0').update(tsconfig).update('\0').update(source);
  const cached = join(dirname(dirname(typescriptManifest)), '.cache', 'tm-cache', `status-page-${inputs.digest('hex').slice(0, 32)}.js`);
  if (existsSync(cached)) return readFileSync(cached, 'utf8');
  const script = transpile(require('typescript') as TypeScript, source);
  keepInCache(cached, script);
  return script;
}

function transpile(ts: TypeScript, source: string): string {
  const configPath = fileURLToPath(new URL('tsconfig.json', PAGE_DIR));
  const config = ts.readConfigFile(configPath, ts.sys.readFile);
  if (config.error) throw new Error(`status page: cannot read ${configPath}: ${ts.flattenDiagnosticMessageText(config.error.messageText, '\n')}`);
  const { options } = ts.parseJsonConfigFileContent(config.config, ts.sys, fileURLToPath(PAGE_DIR), undefined, configPath);
  return ts.transpileModule(source, { compilerOptions: options, fileName: 'page.ts' }).outputText;
}

/** Written whole then renamed, so a parallel test worker reads all of it or nothing; a cache, so a failure to write is no error. */
function keepInCache(path: string, script: string): void {
  const partial = `${path}.${process.pid}.tmp`;
  try {
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(partial, script);
    renameSync(partial, path);
  } catch {
    rmSync(partial, { force: true });
  }
}

/**
 * `document` with `tag` replaced by `element` wrapping `content`. The content must not end its
 * element early (an HTML parser would close it at `</script` or `</style`, and `<!--` changes how
 * it looks for that end), so the hash would no longer describe what runs; and the tag must be
 * there exactly once. Both fail at start.
 */
function inline(document: string, tag: string, element: 'style' | 'script', content: string): string {
  for (const unsafe of [`</${element}`, '<!--']) {
    if (content.toLowerCase().includes(unsafe)) throw new Error(`status page: the inlined ${element} contains ${unsafe}`);
  }
  const at = document.indexOf(tag);
  if (at < 0 || document.indexOf(tag, at + 1) >= 0) throw new Error(`status page: index.html must hold ${tag} exactly once`);
  return `${document.slice(0, at)}<${element}>${content}</${element}>${document.slice(at + tag.length)}`;
}

// The text of the inlined <style> and <script>, from the line after the tag: exactly what the
// browser hashes, so exactly what the CSP below hashes.
const STYLE = `\n${readPageFile('page.css')}`;
const SCRIPT = `\n${readPageScript()}`;

export const STATUS_PAGE_HTML = inline(inline(readPageFile('index.html'), STYLE_TAG, 'style', STYLE), SCRIPT_TAG, 'script', SCRIPT);

function sha256(source: string): string {
  return `'sha256-${createHash('sha256').update(source, 'utf8').digest('base64')}'`;
}

/**
 * Allows the page's one inline script and one inline style by hash, same-origin fetches (the
 * stats), a data: favicon, and nothing else: no framing, no <base>, no form submission.
 */
export const STATUS_PAGE_CSP = [
  "default-src 'none'",
  `script-src ${sha256(SCRIPT)}`,
  `style-src ${sha256(STYLE)}`,
  "connect-src 'self'",
  "img-src 'self' data:",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

/** Every header the page is served with (the route sends these as they are). */
export const STATUS_PAGE_HEADERS: Readonly<Record<string, string>> = Object.freeze({
  'content-type': 'text/html; charset=utf-8',
  'content-security-policy': STATUS_PAGE_CSP,
  'cache-control': 'no-store',
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
});
