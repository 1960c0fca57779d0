/**
 * The usual fixture of a proxy test file: one emulator, one proxy in front of it (started with
 * `overrides` and an optional clock), emulator stats reset before each test, both closed after.
 */
import { afterAll, beforeAll, beforeEach } from 'vitest';
import type { Config } from '../../src/config/schema.js';
import { startTestEmulator, type TestEmulator } from './emulator.js';
import { startTestProxy, type DeepPartial, type TestProxy } from './proxy.js';

export interface ProxyFixture {
  readonly emulator: TestEmulator;
  readonly proxy: TestProxy;
}

export function proxyOverEmulator(overrides: DeepPartial<Config> = {}, now?: () => number): ProxyFixture {
  const fixture = {} as { emulator: TestEmulator; proxy: TestProxy };
  beforeAll(async () => {
    fixture.emulator = await startTestEmulator();
    fixture.proxy = await startTestProxy(fixture.emulator.url, overrides, now);
  });
  afterAll(async () => {
    await fixture.proxy?.close();
    await fixture.emulator?.close();
  });
  beforeEach(async () => {
    await fixture.emulator.resetStats();
  });
  return fixture;
}
