/**
 * A real headless Chromium (Debian's `chromium` package, installed by .ci/run where missing)
 * driven by playwright-core, for the status page's tests; and a small fixture server that
 * serves the page with its real headers next to a stats JSON the test controls, for what the
 * real admin API cannot produce (hostile strings, a known series, a 404).
 *
 *   const browser = await launchChromium();
 *   const tab = await openTab(browser, `${url}/`);      // collects console errors, CSP violations, dialogs
 *   await signIn(tab.page, 'the-token');
 *   await readStat(tab.page, 'hitRatio')                // { text: '75.0 %', value: '0.75' }
 */
import { existsSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { STATUS_PAGE_HEADERS, STATUS_PAGE_HTML } from '../../src/ops/status-page.js';

const CHROMIUM_PATH = process.env['CHROMIUM_PATH'] ?? '/usr/bin/chromium';

const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

export async function launchChromium(): Promise<Browser> {
  if (!existsSync(CHROMIUM_PATH)) {
    throw new Error(`no Chromium at ${CHROMIUM_PATH}: install Debian's chromium package (.ci/run does) or set CHROMIUM_PATH`);
  }
  return chromium.launch({ executablePath: CHROMIUM_PATH, args: CHROMIUM_ARGS, timeout: 30_000 });
}

export interface Tab {
  readonly page: Page;
  /** Console errors, uncaught exceptions, CSP violations and dialogs (alert…) seen so far. */
  problems(): string[];
  /** What a browser keeps across a restart (cookies, localStorage; never sessionStorage). */
  storageState(): Promise<StorageState>;
  close(): Promise<void>;
}

export type StorageState = Awaited<ReturnType<BrowserContext['storageState']>>;

/**
 * A fresh browser context (its own sessionStorage) with one page at `url`. CSP violations are
 * caught by a `securitypolicyviolation` listener installed before any page script runs (an init
 * script runs outside the page's CSP) as well as by Chromium's console error for them.
 */
export async function openTab(browser: Browser, url: string, viewport = { width: 1280, height: 800 }, storageState?: StorageState): Promise<Tab> {
  const context = await browser.newContext({ viewport, ...(storageState === undefined ? {} : { storageState }) });
  const page = await context.newPage();
  const problems: string[] = [];
  page.on('console', (msg) => {
    if (msg.type() === 'error') problems.push(`console: ${msg.text()}`);
  });
  page.on('pageerror', (err) => problems.push(`pageerror: ${err.message}`));
  page.on('dialog', (dialog) => {
    problems.push(`dialog: ${dialog.type()} ${dialog.message()}`);
    void dialog.dismiss();
  });
  await page.exposeFunction('__reportCspViolation', (what: string) => problems.push(`csp: ${what}`));
  await page.addInitScript({
    content: `document.addEventListener('securitypolicyviolation', (e) =>
      window.__reportCspViolation(e.violatedDirective + ' blocked ' + (e.blockedURI || 'inline')));`,
  });
  await page.goto(url);
  return { page, problems: () => [...problems], storageState: () => context.storageState(), close: () => context.close() };
}

/** Types the admin token into the page's form (ticking "Remember on this device" when asked) and submits it. */
export async function signIn(page: Page, token: string, remember = false): Promise<void> {
  await page.getByLabel('Admin token').fill(token);
  if (remember) await page.getByLabel('Remember on this device').check();
  await page.getByRole('button', { name: 'Show status' }).click();
}

/** Waits until the page has rendered a successful poll (body data-state="ok"). */
export async function waitForFigures(page: Page): Promise<void> {
  await page.waitForSelector('body[data-state="ok"]', { timeout: 15_000 });
}

export interface StatReading {
  readonly text: string;
  /** The raw value the page rendered (data-value): '' for null. */
  readonly value: string;
}

export async function readStat(page: Page, name: string): Promise<StatReading> {
  const el = page.locator(`[data-stat="${name}"]`).first();
  return { text: (await el.textContent()) ?? '', value: (await el.getAttribute('data-value')) ?? '' };
}

/** The rows of a top table: the name cell's text and the raw numbers of the others. */
export async function readTopTable(page: Page, name: 'top.operations' | 'top.users'): Promise<{ name: string; values: string[] }[]> {
  return page.locator(`[data-stat="${name}"] tr`).evaluateAll((rows) =>
    rows
      .filter((tr) => tr.querySelector('td[data-value]'))
      .map((tr) => ({
        name: tr.querySelector('td')?.textContent ?? '',
        values: [...tr.querySelectorAll('td[data-value]')].map((td) => td.getAttribute('data-value') ?? ''),
      })),
  );
}

export interface StatsFixture {
  readonly url: string;
  /** What GET /admin/stats answers from now on (with the right token). */
  setStats(stats: unknown): void;
  /** The token the fixture accepts from now on (a rotated token makes the page ask again). */
  setToken(token: string | null): void;
  /** A status other than 200 makes /admin/stats fail with it (with the right token); null: answer. */
  setFailure(status: number | null): void;
  /** Every request target the fixture received, as its access log would show them. */
  requestTargets(): string[];
  close(): Promise<void>;
}

/**
 * Serves STATUS_PAGE_HTML at / with STATUS_PAGE_HEADERS (the CSP included) and the stats at
 * /admin/stats behind `Authorization: Bearer <token>`, as contracts.md describes the admin API:
 * 401 JSON for a wrong token, 404 for everything when no token is set. `headers` replaces the
 * page's headers (a test of the test: a wrong CSP must show).
 */
export async function startStatsFixture(
  token: string | null,
  stats: unknown,
  headers: Readonly<Record<string, string>> = STATUS_PAGE_HEADERS,
): Promise<StatsFixture> {
  let current = { token, stats, failure: null as number | null };
  const targets: string[] = [];
  const server: Server = createServer((req, res) => {
    targets.push(req.url ?? '');
    const json = (status: number, body: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    if (req.method === 'GET' && req.url === '/') {
      res.writeHead(200, headers);
      res.end(STATUS_PAGE_HTML);
    } else if (req.method === 'GET' && req.url === '/admin/stats') {
      if (current.token === null) json(404, { message: 'Not Found' });
      else if (req.headers.authorization !== `Bearer ${current.token}`) json(401, { message: 'A valid admin token is required.' });
      else if (current.failure !== null) json(current.failure, { message: 'Internal Server Error' });
      else json(200, current.stats);
    } else {
      json(404, { message: 'Not Found' });
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    setStats: (stats) => void (current = { ...current, stats }),
    setToken: (token) => void (current = { ...current, token }),
    setFailure: (failure) => void (current = { ...current, failure }),
    requestTargets: () => [...targets],
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
