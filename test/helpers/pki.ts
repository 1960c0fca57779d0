/**
 * A private CA made with openssl, as an operator's own PKI (or cert-manager's issuer) would be,
 * that issues as many server and client certificates as a test needs: each with its own key and
 * serial number, so a test can tell which one a listener serves. EC keys: quick to make.
 * (redis-topologies.ts `makeTestPki` makes the one fixed server pair its Redis servers need.)
 */
import { execFileSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export interface IssuedPair {
  /** Paths of the PEM files. */
  readonly cert: string;
  readonly key: string;
  /** The certificate's serial number as node:tls reports it (upper-case hex). */
  readonly serial: string;
}

const EC_KEY = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

export class TestCa {
  /** Path of the CA certificate (PEM). */
  readonly cert: string;
  readonly #key: string;

  constructor(
    private readonly dir: string,
    name = 'ca',
  ) {
    this.cert = join(dir, `${name}.pem`);
    this.#key = join(dir, `${name}.key`);
    this.#ssl('req', '-x509', ...EC_KEY, '-keyout', this.#key, '-out', this.cert, '-days', '2', '-subj', `/CN=tm-cache test CA ${name}`);
  }

  /** The CA certificate's PEM text (what a client trusts). */
  get pem(): string {
    return readFileSync(this.cert, 'utf8');
  }

  /** A certificate for localhost and 127.0.0.1 (server) or for a client, with its key, in `dir`. */
  issue(name: string, usage: 'server' | 'client' = 'server'): IssuedPair {
    const [cert, key, csr, ext] = ['pem', 'key', 'csr', 'ext'].map((suffix) => join(this.dir, `${name}.${suffix}`)) as [string, string, string, string];
    writeFileSync(ext, usage === 'server' ? 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' : 'extendedKeyUsage=clientAuth\n');
    this.#ssl('req', ...EC_KEY, '-keyout', key, '-out', csr, '-subj', `/CN=${usage === 'server' ? 'localhost' : name}`);
    this.#ssl('x509', '-req', '-in', csr, '-CA', this.cert, '-CAkey', this.#key, '-CAcreateserial', '-out', cert, '-days', '2', '-extfile', ext);
    return { cert, key, serial: new X509Certificate(readFileSync(cert)).serialNumber };
  }

  #ssl(...args: string[]): void {
    execFileSync('openssl', args, { cwd: this.dir, stdio: 'ignore' });
  }
}
