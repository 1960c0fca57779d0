/**
 * The reference caches tm-cache is compared with: Varnish (malloc storage) and nginx
 * `proxy_cache`, both configured to cache a credentialed GET keyed on Authorization + URL, as
 * tm-cache keys per caller. Each runs in the foreground in its own process group, pinned to the
 * server core, with every file it writes under a private temporary directory.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { missingBinary } from './guards.js';
import { findBinary, startProcess, waitForHttp, type Proc } from './procs.js';

export interface Backend {
  readonly host: string;
  readonly port: number;
}

export interface Peer {
  readonly name: string;
  readonly url: string;
  readonly proc: Proc;
}

/**
 * Varnish's built-in vcl_recv passes any request carrying Authorization; ours hashes it instead,
 * and puts the credential in the hash so callers never share an object.
 */
export function makeVcl(backend: Backend, freshness = '  set beresp.ttl = 30s;\n  set beresp.grace = 0s;'): string {
  return `vcl 4.1;
backend default { .host = "${backend.host}"; .port = "${backend.port}"; }
sub vcl_recv { return (hash); }
sub vcl_hash { hash_data(req.url); hash_data(req.http.Authorization); return (lookup); }
sub vcl_backend_response {
  unset beresp.http.Set-Cookie;
${freshness}
  return (deliver);
}
`;
}

/** Varnish with `vcl` (default makeVcl: 30 s, no grace), its work directory under `dir`. */
export async function startVarnish(dir: string, port: number, backend: Backend, cpu: number, vclText = makeVcl(backend)): Promise<Peer | string> {
  const missing = missingBinary('varnishd');
  if (missing) return missing;
  const varnishd = findBinary('varnishd')!;
  const vcl = join(dir, 'bench.vcl');
  writeFileSync(vcl, vclText);
  const workdir = join(dir, 'varnish');
  mkdirSync(workdir, { recursive: true });
  // -j none: no privilege separation, so a root run can compile the VCL in a root-owned tmpdir.
  const args = ['-F', '-j', 'none', '-a', `127.0.0.1:${port}`, '-s', 'malloc,256m', '-f', vcl, '-n', workdir];
  const proc = startProcess('varnishd', varnishd, args, { cpu });
  const url = `http://127.0.0.1:${port}`;
  await waitForHttp(`${url}/__emulator/tokens`, proc, { timeoutMs: 30_000 });
  return { name: 'varnish', url, proc };
}

/** A `location` proxying to the emulator over keepalive connections, with `extra` directives. */
export function proxyLocation(match: string, extra: string): string {
  return `    location ${match} {
      proxy_pass http://emulator;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
${extra}
    }`;
}

/** nginx.conf: one worker, no master, every file under `dir`, keepalive to the emulator. */
export function nginxConf(dir: string, port: number, backend: Backend, http: string, locations: string): string {
  const d = (name: string) => join(dir, name);
  return `worker_processes 1;
daemon off;
master_process off;
pid ${d('nginx.pid')};
error_log ${d('error.log')} warn;
events { worker_connections 4096; }
http {
  access_log off;
  sendfile on;
  # wrk keeps its 32 connections for the whole run; nginx would otherwise close each after 1000.
  keepalive_requests 1000000;
  client_body_temp_path ${d('client_body')};
  proxy_temp_path ${d('proxy_temp')};
  fastcgi_temp_path ${d('fastcgi_temp')};
  uwsgi_temp_path ${d('uwsgi_temp')};
  scgi_temp_path ${d('scgi_temp')};
${http}
  upstream emulator { server ${backend.host}:${backend.port}; keepalive 8; }
  server {
    listen 127.0.0.1:${port};
${locations}
  }
}
`;
}

function makeNginxConf(dir: string, port: number, backend: Backend): string {
  return nginxConf(
    dir,
    port,
    backend,
    `  proxy_cache_path ${join(dir, 'cache')} levels=1:2 keys_zone=bench:10m max_size=256m inactive=60s use_temp_path=off;`,
    proxyLocation(
      '/',
      `      proxy_cache bench;
      proxy_cache_key "$http_authorization$request_uri";
      proxy_cache_valid 200 30s;
      proxy_ignore_headers Cache-Control Expires Set-Cookie;
      proxy_cache_lock on;`,
    ),
  );
}

/**
 * nginx as a plain reverse proxy (`proxy_pass`, no cache, keepalive upstream): the baseline of a
 * miss, the least any proxy can add to asking upstream.
 */
export function makeNginxPassConf(dir: string, port: number, backend: Backend): string {
  // Buffering as nginx ships (on): it streams the answer to the client as it arrives.
  return nginxConf(dir, port, backend, '', proxyLocation('/', ''));
}

export type NginxConf = (dir: string, port: number, backend: Backend) => string;

/** nginx with `conf` (default the proxy_cache one), its files under `dir`/`name`. */
export async function startNginx(
  dir: string,
  port: number,
  backend: Backend,
  cpu: number,
  conf: NginxConf = makeNginxConf,
  name = 'nginx',
): Promise<Peer | string> {
  const missing = missingBinary('nginx');
  if (missing) return missing;
  const nginx = findBinary('nginx')!;
  const prefix = join(dir, name.replace(/[^a-z0-9]+/gi, '-'));
  mkdirSync(prefix, { recursive: true });
  const confFile = join(prefix, 'nginx.conf');
  writeFileSync(confFile, conf(prefix, port, backend));
  // -e: the startup error log too goes to the tmpdir, not /var/log/nginx.
  const proc = startProcess(name, nginx, ['-e', join(prefix, 'error.log'), '-p', prefix, '-c', confFile], { cpu });
  const url = `http://127.0.0.1:${port}`;
  await waitForHttp(`${url}/__emulator/tokens`, proc, { timeoutMs: 15_000 });
  return { name, url, proc };
}
