/**
 * Secrets in settings: how key material is read, and how a value is kept out of messages.
 * Invariant: nothing here ever returns or embeds the secret text it was given, except
 * `parseKeyList`'s result itself.
 */

/** What a message shows instead of a secret. */
export const REDACTED = '<redacted>';

/**
 * Key material of a secret: hex (even length) first, else standard or URL-safe base64, padded or
 * not. `undefined` when it is neither. The Redis tier decodes `encryptionKeys` and `hmacSecret`
 * with this same function, so what passes validation is what gets used.
 */
export function decodeSecret(text: string): Buffer | undefined {
  if (text.length > 0 && text.length % 2 === 0 && /^[0-9a-fA-F]+$/.test(text)) return Buffer.from(text, 'hex');
  if (!/^[A-Za-z0-9+/_-]+={0,2}$/.test(text)) return undefined;
  const bytes = Buffer.from(text.replace(/-/g, '+').replace(/_/g, '/'), 'base64');
  // Node's decoder skips what it cannot read: only a round trip proves the text was base64.
  const canonical = (s: string) => s.replace(/-/g, '+').replace(/_/g, '/').replace(/=+$/, '');
  return bytes.length > 0 && canonical(bytes.toString('base64')) === canonical(text) ? bytes : undefined;
}

/**
 * Hides the user-info of a URL (`redis://:password@host`) and its query and fragment (a Redis URL
 * may carry `?password=...`), parseable or not.
 */
export function redactUrl(url: string): string {
  return url.replace(/^([A-Za-z][A-Za-z0-9+.-]*:\/\/)[^/?#]*@/, `$1${REDACTED}@`).replace(/([?#]).*$/s, `$1${REDACTED}`);
}

export const KEY_LIST_FORMAT = 'comma-separated id:key pairs, e.g. k2:<64 hex chars>,k1:<base64 of 32 bytes>';

/**
 * `id1:key1,id2:key2` → `{ id1: key1, id2: key2 }` (spaces and empty items ignored), or the reason
 * it is not such a list. The reason names a duplicated id but never a key.
 */
export function parseKeyList(raw: string): { readonly keys: Record<string, string> } | { readonly problem: string } {
  const keys: Record<string, string> = {};
  for (const item of raw
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '')) {
    const colon = item.indexOf(':');
    const id = colon === -1 ? '' : item.slice(0, colon).trim();
    const key = colon === -1 ? '' : item.slice(colon + 1).trim();
    if (id === '' || key === '') return { problem: `received ${REDACTED}` };
    if (Object.hasOwn(keys, id)) return { problem: `key id ${JSON.stringify(id)} appears twice` };
    keys[id] = key;
  }
  return { keys };
}
