/**
 * `tm-cache healthcheck`: asks this host's own management port for `/healthz`, with the scheme,
 * address and port the configuration gives it (the same file, environment and flags as `serve`),
 * so that the image's HEALTHCHECK follows `server.tls` and `server.managementPort`.
 *
 * The certificate, with TLS on the management port: the check connects to a loopback address, a
 * name no certificate made for the service carries, so the usual verification (a trusted issuer,
 * the host name) cannot be asked. Instead the server must present exactly the certificate
 * `server.tls.certFile` holds (its SHA-256 fingerprint): only a process holding that certificate's
 * key passes, whoever issued it. The check sends no credential, only `GET /healthz`.
 */
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { TLSSocket } from 'node:tls';
import type { Config } from '../config/schema.js';
import { readTlsMaterial, usesTls } from '../config/tls-files.js';

/** Below the image's HEALTHCHECK --timeout (3 s): the check says why it failed before it is killed. */
const HEALTH_CHECK_TIMEOUT_MS = 2_500;

/** Where the management port is reached from inside the same host (or container). */
export interface HealthCheckTarget {
  readonly url: string;
  /** SHA-256 fingerprint (as node:tls writes it) of the certificate the server must present; absent over plain HTTP. */
  readonly fingerprint256?: string | undefined;
}

/** A wildcard listen address is reached through loopback; a named one as it is. */
function connectHost(listenHost: string): string {
  if (listenHost === '0.0.0.0') return '127.0.0.1';
  if (listenHost === '::') return '[::1]';
  return listenHost.includes(':') ? `[${listenHost}]` : listenHost;
}

export function healthCheckTarget(config: Config): HealthCheckTarget {
  const { managementHost, managementPort, tls } = config.server;
  const secure = usesTls(tls) && tls.management;
  const url = `${secure ? 'https' : 'http'}://${connectHost(managementHost)}:${managementPort}/healthz`;
  if (!secure) return { url };
  const read = readTlsMaterial(tls);
  // loadConfig has read the same files already: a problem here means they changed in between.
  if ('problems' in read) throw new Error(read.problems.join('; '));
  return { url, fingerprint256: read.material.leaf.fingerprint256 };
}

/** `undefined` when /healthz answered 200 (from the expected certificate), else why not. */
export async function checkHealth(target: HealthCheckTarget): Promise<string | undefined> {
  const https = target.fingerprint256 !== undefined;
  const send = https ? httpsRequest : httpRequest;
  return new Promise((resolve) => {
    const req = send(
      target.url,
      { agent: false, timeout: HEALTH_CHECK_TIMEOUT_MS, ...(https ? { rejectUnauthorized: false } : {}) },
      (res: IncomingMessage) => {
        res.resume();
        if (https) {
          const presented = (res.socket as TLSSocket).getPeerCertificate().fingerprint256;
          if (presented !== target.fingerprint256) {
            resolve(`${target.url}: the server presented a certificate other than server.tls.certFile's`);
            return;
          }
        }
        resolve(res.statusCode === 200 ? undefined : `${target.url}: HTTP ${res.statusCode ?? '?'}`);
      },
    );
    req.on('timeout', () => req.destroy(new Error(`no answer within ${HEALTH_CHECK_TIMEOUT_MS} ms`)));
    req.on('error', (err: NodeJS.ErrnoException) => resolve(`${target.url}: ${err.code ?? err.message}`));
    req.end();
  });
}
