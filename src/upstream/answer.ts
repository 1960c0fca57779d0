/**
 * What an upstream answer is, decided once: a fill, an identity look-up (`GET /user`) and a
 * project access confirmation (`GET /projects/{id}`) each read this classification and act on it
 * with their own policy (storing, remembering a caller, confirming); none looks at a status or a
 * Content-Type on its own.
 *
 * | class          | the answer                               | what it is                                               |
 * |----------------|------------------------------------------|----------------------------------------------------------|
 * | `server-error` | 5xx, whatever its body                   | the instance failing: no verdict on the request (`reset`) |
 * | `rate-limited` | 429, whatever its body                   | the instance's verdict on the caller's pace              |
 * | `redirect`     | 3xx, whatever its body                   | relayed whole, Location included (RFC 9110 §15.4)        |
 * | `unauthorized` | 401, whatever its body                   | the instance's (or its gateway's) verdict on the credential |
 * | `forbidden`    | 403, whatever its body                   | the same, on the caller's rights                         |
 * | `not-json`     | anything else that is not JSON           | not the API speaking (an SSO page, a captive portal): no verdict (`bad-answer`) |
 * | `ok`           | a JSON 200                               | the document asked for                                   |
 * | `not-found`    | a JSON 404                               | the instance hides or lacks what was asked               |
 * | `other`        | any other JSON answer (400, 422, a 201…) | the instance's verdict, relayed                          |
 *
 * The Read API answers JSON (`application/json` or a `+json` type, RFC 6839 §3.1). A 304/204
 * never comes here: the cache's own requests are unconditional GETs of documents.
 */
import type { UpstreamResponse } from './client.js';
import { UpstreamError } from './upstream-error.js';

export type AnswerClass = 'server-error' | 'rate-limited' | 'redirect' | 'unauthorized' | 'forbidden' | 'not-json' | 'ok' | 'not-found' | 'other';

/** Classifies an answer (the table above, top to bottom). No allocation: a miss's Content-Type is parsed at most once. */
export function classifyAnswer(res: UpstreamResponse): AnswerClass {
  const status = res.status;
  if (status >= 500) return 'server-error';
  if (status === 429) return 'rate-limited';
  if (status >= 300 && status < 400) return 'redirect';
  if (status === 401) return 'unauthorized';
  if (status === 403) return 'forbidden';
  if (!isJsonAnswer(res)) return 'not-json';
  return status === 200 ? 'ok' : status === 404 ? 'not-found' : 'other';
}

/**
 * The classes that are the upstream failing rather than answering, one line each, as the error
 * they become: a 502 whose body names what came back (served.ts). `asked`: the request the cache
 * made on its own account (`GET /user`), named in the message; a fill's is the client's own.
 */
const FAILURES: Partial<Record<AnswerClass, (res: UpstreamResponse, asked: string | undefined) => UpstreamError>> = {
  'server-error': (res, asked) => new UpstreamError('reset', `the upstream answered ${res.status}${asked === undefined ? '' : ` to ${asked}`}`),
  'not-json': (res, asked) =>
    new UpstreamError('bad-answer', `the upstream answered ${asked === undefined ? '' : `${asked} with `}${describeAnswer(res)}, not JSON`),
};

/** The failure an answer is (a 5xx, or not the API's kind of answer), or undefined when it is the instance's verdict. */
export function answerFailure(res: UpstreamResponse, asked?: string): UpstreamError | undefined {
  return FAILURES[classifyAnswer(res)]?.(res, asked);
}

/** What came back, for a message: `200 text/html`. The media type only, cut short: it is the upstream's text. */
export function describeAnswer(res: UpstreamResponse): string {
  const type = mediaTypeOf(res.headers['content-type']);
  return `${res.status} ${type === '' ? 'without a Content-Type' : type.replace(/[^\w.+/-]/g, '').slice(0, 80)}`;
}

/** The last Content-Type seen and its verdict: an instance answers with one or two values, so a miss parses none. */
let lastContentType: string | undefined;
let lastIsJson = false;

function isJsonAnswer(res: UpstreamResponse): boolean {
  const value = res.headers['content-type'];
  if (typeof value === 'string' && value === lastContentType) return lastIsJson;
  const type = mediaTypeOf(value);
  const json = type === 'application/json' || (type.startsWith('application/') && type.endsWith('+json'));
  if (typeof value === 'string') {
    lastContentType = value;
    lastIsJson = json;
  }
  return json;
}

function mediaTypeOf(contentType: string | string[] | undefined): string {
  const value = Array.isArray(contentType) ? contentType[0] : contentType;
  return value === undefined ? '' : value.split(';', 1)[0]!.trim().toLowerCase();
}
