/**
 * The files of `server.tls`, read and checked: each a readable regular file; the certificate chain
 * PEM certificates that parse; the key a PEM private key (unencrypted) that belongs to the chain's
 * first certificate; the client CA PEM certificates that parse. At start a problem stops tm-cache
 * (exit code 2, naming the setting); on a reload or a change of the files it keeps the certificate
 * in use (proxy/certificates.ts). Never shows what a file holds, only its path and what is wrong.
 */
import { createPrivateKey, X509Certificate } from 'node:crypto';
import { closeSync, constants, fstatSync, openSync, readFileSync } from 'node:fs';
import { createSecureContext } from 'node:tls';
import type { Config } from './schema.js';
import { originOf, type Origin } from './validate.js';

export type TlsSettings = Config['server']['tls'];

export interface TlsMaterial {
  readonly cert: Buffer;
  readonly key: Buffer;
  /** The client CA certificates: client certificates are required when present. */
  readonly ca?: Buffer | undefined;
  /** The served certificate (the chain's first): what logs and metrics say of it. */
  readonly leaf: X509Certificate;
}

/** A new certificate read while running: served from the next connection on, or refused (the one in use kept). */
export type CertificateReloadResult = 'applied' | 'refused';

export type TlsRead = { readonly material: TlsMaterial } | { readonly problems: readonly string[] };

/** TLS is on when a certificate is configured (relations.ts makes sure the key is too). */
export const usesTls = (tls: TlsSettings): boolean => tls.certFile !== '';

/** The material named by `tls` (TLS on), or every problem found, each naming its setting. */
export function readTlsMaterial(tls: TlsSettings, origin: Origin = new Map()): TlsRead {
  const problems: string[] = [];
  const fail = (setting: string, path: string, reason: string): undefined => {
    const source = originOf(setting, origin);
    problems.push(`${setting}${source === undefined ? '' : ` (from ${source})`}: ${JSON.stringify(path)} ${reason}`);
    return undefined;
  };
  const cert = readPem('server.tls.certFile', tls.certFile, fail);
  const key = readPem('server.tls.keyFile', tls.keyFile, fail);
  const ca = tls.clientCaFile === '' ? undefined : readPem('server.tls.clientCaFile', tls.clientCaFile, fail);
  const chain = cert && certificatesIn(cert, 'server.tls.certFile', tls.certFile, fail);
  const privateKey = key && privateKeyIn(key, tls.keyFile, fail);
  if (ca) certificatesIn(ca, 'server.tls.clientCaFile', tls.clientCaFile, fail);
  const leaf = chain?.[0];
  if (leaf && privateKey && !leaf.checkPrivateKey(createPrivateKey(privateKey))) {
    fail(
      'server.tls.keyFile',
      tls.keyFile,
      `is not the private key of the certificate in server.tls.certFile (${JSON.stringify(tls.certFile)}): give the pair that belongs together`,
    );
  }
  if (problems.length > 0 || !cert || !key || !leaf) return { problems };
  try {
    // What OpenSSL itself would refuse when the listener uses them (an unsupported key type).
    createSecureContext({ cert, key, ...(ca ? { ca } : {}) });
  } catch (error) {
    fail('server.tls.certFile', tls.certFile, `and server.tls.keyFile cannot be used together: ${(error as Error).message}`);
    return { problems };
  }
  return { material: { cert, key, ca, leaf } };
}

type Fail = (setting: string, path: string, reason: string) => undefined;

/**
 * The file's bytes, opened non-blocking and refused unless it is a regular file (a FIFO would
 * block the process for good). A symbolic link is followed: Kubernetes mounts a Secret's keys as
 * links into a directory it swaps atomically.
 */
function readPem(setting: string, path: string, fail: Fail): Buffer | undefined {
  let fd: number | undefined;
  try {
    fd = openSync(path, constants.O_RDONLY | (constants.O_NONBLOCK ?? 0));
    if (!fstatSync(fd).isFile()) return fail(setting, path, 'is not a regular file; allowed: a readable PEM file');
    return readFileSync(fd);
  } catch (error) {
    return fail(setting, path, `cannot be read (${(error as NodeJS.ErrnoException).code ?? String(error)}); allowed: a readable PEM file`);
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

const PEM_CERTIFICATE = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g;

function certificatesIn(pem: Buffer, setting: string, path: string, fail: Fail): X509Certificate[] | undefined {
  const blocks = pem.toString('latin1').match(PEM_CERTIFICATE) ?? [];
  if (blocks.length === 0) return fail(setting, path, 'holds no PEM certificate (-----BEGIN CERTIFICATE-----)');
  const parsed: X509Certificate[] = [];
  for (const [i, block] of blocks.entries()) {
    try {
      parsed.push(new X509Certificate(block));
    } catch {
      return fail(setting, path, `holds a certificate that does not parse (the ${ordinal(i + 1)} PEM block)`);
    }
  }
  return parsed;
}

function privateKeyIn(pem: Buffer, path: string, fail: Fail): Buffer | undefined {
  try {
    const key = createPrivateKey(pem);
    return key.type === 'private' ? pem : fail('server.tls.keyFile', path, 'holds no private key');
  } catch {
    // Node's reason may quote part of the file: only what is expected is said.
    return fail('server.tls.keyFile', path, 'holds no unencrypted PEM private key (-----BEGIN PRIVATE KEY----- or -----BEGIN RSA/EC PRIVATE KEY-----)');
  }
}

const ordinal = (n: number): string => (n === 1 ? '1st' : n === 2 ? '2nd' : n === 3 ? '3rd' : `${n}th`);
