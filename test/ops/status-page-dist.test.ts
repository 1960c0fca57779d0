/**
 * The status page as the image serves it: the built `node dist/cli.js serve`, with TypeScript out of
 * reach as in the production image (npm ci --omit=dev). The page's parts are files the build puts
 * in dist/ops/status-page/; the served script must be the compiled page.ts, the served document the
 * one the source serves (under vitest the page is transpiled in-process), and the CSP must hash
 * exactly the script and style that are served, or the browser runs neither.
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { STATUS_PAGE_HEADERS, STATUS_PAGE_HTML } from '../../src/ops/status-page.js';
import { startTestEmulator, type TestEmulator } from '../helpers/emulator.js';
import { httpGet } from '../helpers/proxy.js';
import { CLI, startServe, type Serving } from '../helpers/serve.js';

const BUILT_PAGE = new URL('../../dist/ops/status-page/', import.meta.url);
const NO_TYPESCRIPT = new URL('../helpers/no-typescript.cjs', import.meta.url).pathname;

let emulator: TestEmulator;
let serve: Serving;

beforeAll(async () => {
  if (!existsSync(CLI)) throw new Error('dist/cli.js is missing: run `npm run build` (npm test does)');
  emulator = await startTestEmulator();
  serve = await startServe({
    TM_CACHE_UPSTREAM: emulator.url,
    TM_CACHE_PORT: '0',
    TM_CACHE_MANAGEMENT_PORT: '0',
    TM_CACHE_ADMIN_TOKEN: 'status-page-dist-test-admin-token',
    NODE_OPTIONS: `--require ${NO_TYPESCRIPT}`,
  });
});

afterAll(async () => {
  serve?.child.kill('SIGKILL');
  await emulator?.close();
});

/** The text of the one `<element>` in a document. */
function inlined(html: string, element: 'script' | 'style'): string {
  const open = `<${element}>`;
  const start = html.indexOf(open);
  expect(start, `a <${element}>`).toBeGreaterThanOrEqual(0);
  return html.slice(start + open.length, html.indexOf(`</${element}>`, start));
}

const sha256 = (text: string) => `'sha256-${createHash('sha256').update(text, 'utf8').digest('base64')}'`;

describe('the status page served by the built command', () => {
  it('inlines the built page.js and page.css, needs no TypeScript, and its CSP hashes exactly what it serves', async () => {
    const res = await httpGet(`${serve.management}/`);
    expect(res.status).toBe(200);
    const html = res.body.toString('utf8');
    const csp = String(res.headers['content-security-policy']);

    const script = inlined(html, 'script');
    const style = inlined(html, 'style');
    expect(script).toBe(`\n${readFileSync(new URL('page.js', BUILT_PAGE), 'utf8')}`);
    expect(style).toBe(`\n${readFileSync(new URL('page.css', BUILT_PAGE), 'utf8')}`);
    expect(csp).toContain(`script-src ${sha256(script)};`);
    expect(csp).toContain(`style-src ${sha256(style)};`);

    // Built or transpiled from source, the same page with the same headers.
    expect(html).toBe(STATUS_PAGE_HTML);
    for (const [name, value] of Object.entries(STATUS_PAGE_HEADERS)) expect(res.headers[name], name).toBe(value);
  });
});
