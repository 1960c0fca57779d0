/**
 * The certificate the listeners serve (`server.tls`), and its rotation without a restart.
 *
 * Read at start (a problem stops tm-cache: ConfigError, exit 2), then again on SIGHUP and whenever
 * the directory of a file changes: cert-manager renews into a Kubernetes Secret, which the kubelet
 * updates by swapping a `..data` symlink in the mounted directory, never the files in place; a
 * script renames new files over the old. A new pair is checked as at start (tls-files.ts) and
 * handed to each listener with `setSecureContext`: new connections get it, open ones keep theirs.
 * A pair that does not read, parse or match keeps the certificate in use, with a warning: a
 * rotation caught half-way never takes the listeners down.
 *
 * Client certificates (`server.tls.clientCaFile`) are required on the proxy port only: the
 * management port answers the kubelet's probes, which present none, and its admin API has a
 * token of its own.
 */
import { watch, type FSWatcher } from 'node:fs';
import type { ServerOptions } from 'node:https';
import { dirname } from 'node:path';
import type { SecureContextOptions, Server as TlsServer } from 'node:tls';
import type { Logger } from 'pino';
import { ConfigError } from './config/errors.js';
import { noticeLogger } from './config/reload.js';
import { readTlsMaterial, type CertificateReloadResult, type TlsMaterial, type TlsSettings } from './config/tls-files.js';

/** Which listener: the proxy port may require client certificates, the management port never does. */
export type Listener = 'proxy' | 'management';

/** A rotation changes several files (two renames, a directory swap): read them once they settle. */
const SETTLE_MS = 250;

export interface CertificateOptions {
  readonly logger: Logger;
  /** Told of each new pair read while running (metrics). */
  readonly onReload?: (result: CertificateReloadResult) => void;
  readonly now?: () => number;
}

export class ServedCertificates {
  #material: TlsMaterial;
  readonly #servers: { readonly server: TlsServer; readonly listener: Listener }[] = [];
  readonly #watchers: FSWatcher[] = [];
  #settle: NodeJS.Timeout | undefined;

  private constructor(
    private readonly settings: TlsSettings,
    material: TlsMaterial,
    private readonly options: CertificateOptions,
  ) {
    this.#material = material;
    this.#warnIfOutOfDate();
  }

  /** Reads the files at start: a problem is a ConfigError naming the setting. */
  static load(settings: TlsSettings, options: CertificateOptions): ServedCertificates {
    const read = readTlsMaterial(settings);
    if ('problems' in read) throw ConfigError.fromProblems(read.problems);
    return new ServedCertificates(settings, read.material, options);
  }

  /** When the served certificate expires (ms since the epoch): for a metric to alert on. */
  get notAfterMs(): number {
    return Date.parse(this.#material.leaf.validTo);
  }

  /** HTTPS options for a listener at start. */
  serverOptions(listener: Listener): ServerOptions {
    const requireClientCert = listener === 'proxy' && this.#material.ca !== undefined;
    return { ...this.#contextOf(listener), ...(requireClientCert ? { requestCert: true, rejectUnauthorized: true } : {}) };
  }

  /** A listening server that gets every new pair. */
  attach(server: TlsServer, listener: Listener): void {
    this.#servers.push({ server, listener });
  }

  /** Watches the files' directories: a change there reads the pair again once changes settle. */
  watch(): void {
    const { certFile, keyFile, clientCaFile } = this.settings;
    const dirs = new Set([certFile, keyFile, clientCaFile].filter((f) => f !== '').map((f) => dirname(f)));
    for (const dir of dirs) {
      try {
        const watcher = watch(dir, { persistent: false }, () => this.#changed());
        watcher.on('error', (err) =>
          this.options.logger.warn({ dir, err: err.message }, 'watching TLS files stopped: new certificates are read on SIGHUP only'),
        );
        this.#watchers.push(watcher);
      } catch (err) {
        this.options.logger.warn({ dir, err: (err as Error).message }, 'cannot watch TLS files: new certificates are read on SIGHUP only');
      }
    }
  }

  /** Reads the pair again (SIGHUP, or its files changed); serves it if it differs and is sound. */
  reload(cause: 'SIGHUP' | 'files changed'): CertificateReloadResult | 'unchanged' {
    const read = readTlsMaterial(this.settings);
    const log = noticeLogger(this.options.logger);
    if ('problems' in read) {
      log.warn(
        { cause, result: 'refused', problems: read.problems.join('; '), serving: describe(this.#material) },
        'TLS certificate reload refused: the certificate in use is kept',
      );
      this.options.onReload?.('refused');
      return 'refused';
    }
    if (sameMaterial(read.material, this.#material)) return 'unchanged';
    this.#material = read.material;
    for (const { server, listener } of this.#servers) server.setSecureContext(this.#contextOf(listener));
    log.warn({ cause, result: 'applied', serving: describe(read.material) }, 'TLS certificate reloaded: served from the next connection on');
    this.#warnIfOutOfDate();
    this.options.onReload?.('applied');
    return 'applied';
  }

  close(): void {
    clearTimeout(this.#settle);
    for (const watcher of this.#watchers) watcher.close();
  }

  #changed(): void {
    clearTimeout(this.#settle);
    this.#settle = setTimeout(() => this.reload('files changed'), SETTLE_MS);
    this.#settle.unref();
  }

  #contextOf(listener: Listener): SecureContextOptions {
    const { cert, key, ca } = this.#material;
    return listener === 'proxy' && ca !== undefined ? { cert, key, ca } : { cert, key };
  }

  #warnIfOutOfDate(): void {
    const now = (this.options.now ?? Date.now)();
    const { leaf } = this.#material;
    if (Date.parse(leaf.validTo) < now || Date.parse(leaf.validFrom) > now) {
      this.options.logger.warn({ serving: describe(this.#material) }, 'the TLS certificate served is not valid now: clients that check it refuse to connect');
    }
  }
}

/** What logs say of a certificate: public parts only. */
function describe({ leaf }: TlsMaterial): { subject: string; serialNumber: string; validTo: string } {
  return { subject: leaf.subject.replace(/\n/g, ', '), serialNumber: leaf.serialNumber, validTo: leaf.validTo };
}

function sameMaterial(a: TlsMaterial, b: TlsMaterial): boolean {
  return a.cert.equals(b.cert) && a.key.equals(b.key) && (a.ca === undefined ? b.ca === undefined : b.ca !== undefined && a.ca.equals(b.ca));
}
