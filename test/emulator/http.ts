/** Tiny HTTP helpers for the emulator tests: real requests through undici. */
import { request } from 'undici';

export interface Answer {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly text: string;
  json(): any;
}

export async function call(url: string, opts: { token?: string; method?: string; body?: string } = {}): Promise<Answer> {
  const headers: Record<string, string> = {};
  if (opts.token !== undefined) headers.authorization = `Bearer ${opts.token}`;
  if (opts.body !== undefined) headers['content-type'] = 'application/json';
  const res = await request(url, { method: (opts.method ?? 'GET') as 'GET', headers, body: opts.body });
  const text = await res.body.text();
  return { status: res.statusCode, headers: res.headers, text, json: () => JSON.parse(text) };
}

export async function get(url: string, token?: string): Promise<Answer> {
  return call(url, token === undefined ? {} : { token });
}

/** Every item of a list, walking its pages at per_page=100. */
export async function getAll(url: string, token: string): Promise<any[]> {
  const items: any[] = [];
  const sep = url.includes('?') ? '&' : '?';
  for (let page: number | null = 1; page !== null;) {
    const a = await get(`${url}${sep}per_page=100&page=${page}`, token);
    if (a.status !== 200) throw new Error(`${url} → ${a.status} ${a.text}`);
    const body = a.json();
    items.push(...body.result);
    page = body.next_page;
  }
  return items;
}

export const ids = (items: readonly { id: number }[]) => items.map((x) => x.id);
export const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
