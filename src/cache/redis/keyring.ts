/**
 * Encryption at rest for what tm-cache puts in Redis: AES-256-GCM (authenticated), a fresh
 * random 12-byte IV per value (NIST SP 800-38D §8.2.2), and a key id in front of every value
 * so keys rotate without a flush: old values still open with their own key, new values are
 * sealed with `current`. A key is retired by removing it once its values have expired.
 */
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';

export interface Keyring {
  /** Key id → 32-byte key. Ids are 1..255 bytes of UTF-8 (they are stored with each value). */
  readonly keys: Readonly<Record<string, Buffer>>;
  /** The id of the key new values are sealed with. */
  readonly current: string;
}

const KEY_BYTES = 32;
const IV_BYTES = 12;
const TAG_BYTES = 16;
const CIPHER = 'aes-256-gcm';

/** Fails fast at start (config validation), naming what is wrong; never called per request. */
export function assertKeyring(keyring: Keyring): void {
  if (!Object.hasOwn(keyring.keys, keyring.current)) {
    throw new Error(`keyring.current "${keyring.current}" is not one of keyring.keys`);
  }
  for (const [id, key] of Object.entries(keyring.keys)) {
    const idBytes = Buffer.byteLength(id);
    if (idBytes < 1 || idBytes > 255) throw new Error(`keyring key id "${id}" must be 1..255 bytes`);
    if (!Buffer.isBuffer(key) || key.length !== KEY_BYTES) {
      throw new Error(`keyring key "${id}" must be ${KEY_BYTES} bytes, got ${Buffer.isBuffer(key) ? key.length : typeof key}`);
    }
  }
}

/**
 * [keyIdLength u8][keyId][iv][ciphertext][tag]. `aad` (the caller's header) and the key id are
 * authenticated with the ciphertext, so neither can be swapped without failing the tag check.
 */
export function seal(plain: Buffer, keyring: Keyring, aad: Buffer): Buffer {
  const key = keyring.keys[keyring.current];
  if (!key) throw new Error(`keyring.current "${keyring.current}" has no key`);
  const keyId = Buffer.from(keyring.current);
  const prefix = Buffer.concat([Buffer.from([keyId.length]), keyId]);
  const iv = randomBytes(IV_BYTES);
  const cipher = createCipheriv(CIPHER, key, iv);
  cipher.setAAD(Buffer.concat([aad, prefix]));
  const ciphertext = Buffer.concat([cipher.update(plain), cipher.final()]);
  return Buffer.concat([prefix, iv, ciphertext, cipher.getAuthTag()]);
}

/** The plaintext, or undefined for an unknown key id, a truncated value or a failed tag. */
export function openSealed(sealed: Buffer, keyring: Keyring, aad: Buffer): Buffer | undefined {
  try {
    const keyIdLength = sealed[0];
    if (keyIdLength === undefined || sealed.length < 1 + keyIdLength + IV_BYTES + TAG_BYTES) return undefined;
    const prefix = sealed.subarray(0, 1 + keyIdLength);
    const key = keyring.keys[prefix.subarray(1).toString()];
    if (!key) return undefined;
    const iv = sealed.subarray(prefix.length, prefix.length + IV_BYTES);
    const ciphertext = sealed.subarray(prefix.length + IV_BYTES, sealed.length - TAG_BYTES);
    const decipher = createDecipheriv(CIPHER, key, iv);
    decipher.setAAD(Buffer.concat([aad, prefix]));
    decipher.setAuthTag(sealed.subarray(sealed.length - TAG_BYTES));
    const plain = decipher.update(ciphertext);
    const rest = decipher.final(); // GCM is a stream mode: empty, once the tag checked
    return rest.length === 0 ? plain : Buffer.concat([plain, rest]);
  } catch {
    return undefined;
  }
}

/** The key id a sealed value was written with (for rotation reporting and tests). */
export function sealedKeyId(sealed: Buffer): string | undefined {
  const keyIdLength = sealed[0];
  if (keyIdLength === undefined || sealed.length < 1 + keyIdLength) return undefined;
  return sealed.subarray(1, 1 + keyIdLength).toString();
}
