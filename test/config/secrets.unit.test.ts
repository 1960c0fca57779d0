import { describe, expect, it } from 'vitest';
import { decodeSecret, parseKeyList, REDACTED, redactUrl } from '../../src/config/secrets.js';

const HEX_KEY = 'ab'.repeat(32);
const B64_KEY = Buffer.alloc(32, 7).toString('base64');

describe('decodeSecret', () => {
  it.each([
    [HEX_KEY, 32],
    [HEX_KEY.toUpperCase(), 32],
    [B64_KEY, 32],
    [B64_KEY.replace(/=+$/, ''), 32],
    [Buffer.alloc(32, 0xfb).toString('base64url'), 32],
    ['ab'.repeat(40), 40],
    ['not a secret!', undefined],
    ['abcde', undefined], // odd-length hex, and not canonical base64 either
    ['', undefined],
  ])('decodeSecret(%j) has %s bytes', (text, length) => {
    expect(decodeSecret(text)?.length).toBe(length);
  });

  it('reads hex as hex even where it is also valid base64', () => {
    expect(decodeSecret('00ff')).toEqual(Buffer.from([0, 255]));
  });

  it('refuses base64 with bits the decoder would drop', () => {
    expect(decodeSecret('QQ==')).toEqual(Buffer.from('A'));
    expect(decodeSecret('QR==')).toBeUndefined();
  });
});

describe('redactUrl', () => {
  it.each([
    ['redis://:s3cret@redis:6379/0', `redis://${REDACTED}@redis:6379/0`],
    ['rediss://user:s3cret@redis', `rediss://${REDACTED}@redis`],
    ['https://bob@tm.example.com/path?x=1', `https://${REDACTED}@tm.example.com/path?${REDACTED}`],
    ['redis://h:1/0?password=s3cret', `redis://h:1/0?${REDACTED}`],
    ['redis://h:1/0#s3cret', `redis://h:1/0#${REDACTED}`],
    ['redis://:p@ss@host', `redis://${REDACTED}@host`], // not parseable as a URL, still hidden
    ['redis://redis:6379', 'redis://redis:6379'],
    ['https://tm.example.com/a@b', 'https://tm.example.com/a@b'], // an @ in the path is no user-info
    ['not a url', 'not a url'],
  ])('%s → %s', (url, shown) => {
    expect(redactUrl(url)).toBe(shown);
  });
});

describe('parseKeyList', () => {
  it('reads id:key pairs, ignoring spaces and empty items', () => {
    expect(parseKeyList(` k2:${HEX_KEY} , k1:${B64_KEY},`)).toEqual({ keys: { k2: HEX_KEY, k1: B64_KEY } });
    expect(parseKeyList('')).toEqual({ keys: {} });
  });

  it('accepts "problem" as a key id like any other', () => {
    expect(parseKeyList(`problem:${HEX_KEY}`)).toEqual({ keys: { problem: HEX_KEY } });
  });

  it.each(['sekritsekrit', `:${HEX_KEY}`, 'k1:', `k1:${HEX_KEY},sekritsekrit`])('refuses %j without echoing it', (raw) => {
    const result = parseKeyList(raw);
    expect(result).toEqual({ problem: `received ${REDACTED}` });
  });

  it('names a duplicated id but not its keys', () => {
    const result = parseKeyList(`a:${HEX_KEY},a:${B64_KEY}`);
    expect(result).toEqual({ problem: 'key id "a" appears twice' });
  });
});
