/**
 * When tracing is on: the environment's say, read once at start (trace/tracing.ts). The SDK is
 * loaded for the cases that turn it on (nothing is exported: no request is traced here).
 */
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import * as switchboard from '../../src/trace/tracing.js';

const silent = pino({ level: 'silent' });

afterEach(async () => {
  await switchboard.stopTracing();
});

describe('startTracing', () => {
  it.each([
    { what: 'nothing set', env: {}, on: false },
    { what: 'an endpoint', env: { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' }, on: true },
    { what: 'a traces endpoint', env: { OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://127.0.0.1:4318/v1/traces' }, on: true },
    { what: 'a blank endpoint', env: { OTEL_EXPORTER_OTLP_ENDPOINT: '  ' }, on: false },
    { what: 'only a service name', env: { OTEL_SERVICE_NAME: 'tm-cache' }, on: false },
    { what: 'an endpoint, the SDK disabled', env: { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318', OTEL_SDK_DISABLED: 'TRUE' }, on: false },
    { what: 'an endpoint, OTEL_SDK_DISABLED=false', env: { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318', OTEL_SDK_DISABLED: 'false' }, on: true },
    { what: 'an endpoint, the traces exporter none', env: { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318', OTEL_TRACES_EXPORTER: 'none' }, on: false },
  ] as { what: string; env: NodeJS.ProcessEnv; on: boolean }[])('$what: on is $on', async ({ env, on }) => {
    await switchboard.startTracing(env, silent, '0.0.0');
    expect(switchboard.tracing !== undefined).toBe(on);
  });

  it('outside a request, a stage makes no span (the budget, the bus and probes are not traced)', async () => {
    await switchboard.startTracing({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' }, silent, '0.0.0');
    expect(switchboard.tracing?.child('redis get', 'client')).toBeUndefined();
    const ran = await switchboard.traced('redis get', 'client', {}, async (span) => span);
    expect(ran).toBeUndefined();
  });

  it('stopTracing turns it off', async () => {
    await switchboard.startTracing({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' }, silent, '0.0.0');
    await switchboard.stopTracing();
    expect(switchboard.tracing).toBeUndefined();
  });
});
