/**
 * The one classification of an upstream answer (src/upstream/answer.ts), as a table: what a fill,
 * an identity look-up and a project confirmation each act on.
 */
import { describe, expect, it } from 'vitest';
import { answerFailure, classifyAnswer, describeAnswer, type AnswerClass } from '../../src/upstream/answer.js';
import type { UpstreamResponse } from '../../src/upstream/client.js';

const JSON_TYPE = 'application/json; charset=utf-8';
const HTML = 'text/html';
const answer = (status: number, contentType?: string | string[]): UpstreamResponse => ({
  status,
  // An instance may repeat the header: undici hands it over as a list (the type says a string).
  headers: contentType === undefined ? {} : ({ 'content-type': contentType } as UpstreamResponse['headers']),
  body: Buffer.alloc(0),
});

describe('classifyAnswer', () => {
  it.each<[number, string | string[] | undefined, AnswerClass]>([
    [200, JSON_TYPE, 'ok'],
    [200, 'application/problem+json', 'ok'],
    [200, ' Application/JSON ', 'ok'],
    [200, [JSON_TYPE, HTML], 'ok'],
    [200, HTML, 'not-json'],
    [200, 'text/json', 'not-json'],
    [200, undefined, 'not-json'],
    [201, JSON_TYPE, 'other'],
    [204, undefined, 'not-json'],
    [301, HTML, 'redirect'],
    [302, undefined, 'redirect'],
    [400, JSON_TYPE, 'other'],
    [400, HTML, 'not-json'],
    [401, HTML, 'unauthorized'],
    [401, JSON_TYPE, 'unauthorized'],
    [403, undefined, 'forbidden'],
    [404, JSON_TYPE, 'not-found'],
    [404, HTML, 'not-json'],
    [422, JSON_TYPE, 'other'],
    [429, HTML, 'rate-limited'],
    [429, JSON_TYPE, 'rate-limited'],
    [500, JSON_TYPE, 'server-error'],
    [502, HTML, 'server-error'],
    [503, undefined, 'server-error'],
  ])('%i with Content-Type %j is %s', (status, contentType, expected) => {
    expect(classifyAnswer(answer(status, contentType))).toBe(expected);
  });

  it('classifies one Content-Type the same however often it comes back, and another one afresh', () => {
    expect([JSON_TYPE, JSON_TYPE, HTML, HTML, JSON_TYPE].map((type) => classifyAnswer(answer(200, type)))).toEqual(['ok', 'ok', 'not-json', 'not-json', 'ok']);
  });
});

describe('answerFailure', () => {
  it.each([
    [answer(503, JSON_TYPE), undefined, 'reset', 502, 'the upstream answered 503'],
    [answer(500, HTML), 'GET /user', 'reset', 502, 'the upstream answered 500 to GET /user'],
    [answer(200, HTML), undefined, 'bad-answer', 502, 'the upstream answered 200 text/html, not JSON'],
    [answer(404, 'text/html; charset=utf-8'), 'GET /user', 'bad-answer', 502, 'the upstream answered GET /user with 404 text/html, not JSON'],
    [answer(200, undefined), undefined, 'bad-answer', 502, 'the upstream answered 200 without a Content-Type, not JSON'],
  ])('%o asked as %s is a %s failure (%i): %s', (res, asked, code, status, message) => {
    expect(answerFailure(res, asked)).toMatchObject({ code, status, message });
  });

  it.each([answer(200, JSON_TYPE), answer(302, HTML), answer(401, HTML), answer(403, HTML), answer(404, JSON_TYPE), answer(422, JSON_TYPE), answer(429, HTML)])(
    "%o is the instance's verdict, no failure",
    (res) => {
      expect(answerFailure(res)).toBeUndefined();
    },
  );
});

describe('describeAnswer', () => {
  it('names the status and the media type only, cut short and stripped of what is not a token', () => {
    expect(describeAnswer(answer(200, 'text/html; charset=utf-8'))).toBe('200 text/html');
    expect(describeAnswer(answer(200, `text/<script>${'x'.repeat(200)}`))).toBe(`200 text/script${'x'.repeat(69)}`);
  });
});
