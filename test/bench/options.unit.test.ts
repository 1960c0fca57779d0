/**
 * The bench's argument parser: names, flags, their environment variables, short defaults, and
 * the errors a wrong value or an unknown flag gives. No scenario is run.
 */
import { describe, expect, it } from 'vitest';
import { parseBenchArgs, UsageError } from './options.js';

describe('parseBenchArgs', () => {
  it('takes scenario names as positionals and from --only, once each, in the order given', () => {
    const args = parseBenchArgs(['hit', 'ab:redis', '--only', 'miss,hit'], {});
    expect(args.scenarios).toEqual(['hit', 'ab:redis', 'miss']);
    expect(parseBenchArgs([], { BENCH_ONLY: 'security,ci-burst' }).scenarios).toEqual(['security', 'ci-burst']);
  });

  it('answers a number knob from its flag, else its variable, else the default', () => {
    expect(parseBenchArgs(['--duration', '5'], { BENCH_DURATION_S: '7' }).options.number('duration', 12)).toBe(5);
    expect(parseBenchArgs([], { BENCH_DURATION_S: '7' }).options.number('duration', 12)).toBe(7);
    expect(parseBenchArgs([], {}).options.number('duration', 12)).toBe(12);
    expect(parseBenchArgs([], { BENCH_DURATION_S: '' }).options.number('duration', 12)).toBe(12);
  });

  it('uses the short default under --short or BENCH_SHORT=1, unless the knob is given', () => {
    expect(parseBenchArgs(['--short'], {}).options.number('duration', 12, 4)).toBe(4);
    expect(parseBenchArgs([], { BENCH_SHORT: '1' }).options.number('duration', 12, 4)).toBe(4);
    expect(parseBenchArgs(['--short', '--duration', '6'], {}).options.number('duration', 12, 4)).toBe(6);
    expect(parseBenchArgs(['--short'], {}).options.number('top', 25)).toBe(25);
  });

  it('reads booleans and strings, and records what was given', () => {
    const args = parseBenchArgs(['--encrypted', '--base', '/tmp/base'], { BENCH_NGINX_CACHE: '1', BENCH_NO_STORE: '0' });
    expect(args.options.flag('encrypted')).toBe(true);
    expect(args.options.flag('nginx-cache')).toBe(true);
    expect(args.options.flag('no-store')).toBe(false);
    expect(args.options.string('base')).toBe('/tmp/base');
    expect(args.options.string('profile-out')).toBeUndefined();
    expect(args.options.given()).toEqual({ encrypted: true, base: '/tmp/base', 'nginx-cache': true });
  });

  it('refuses a value that is not what the knob takes, and an unknown flag', () => {
    expect(() => parseBenchArgs(['--duration', 'soon'], {})).toThrow(UsageError);
    expect(() => parseBenchArgs(['--rounds', '0'], {})).toThrow(/--rounds 0: expected a positive number/);
    expect(() => parseBenchArgs([], { BENCH_ROUNDS: 'four' })).toThrow(/BENCH_ROUNDS four/);
    expect(() => parseBenchArgs([], { BENCH_ENCRYPTED: 'maybe' })).toThrow(/BENCH_ENCRYPTED/);
    expect(() => parseBenchArgs(['--durations', '5'], {})).toThrow(UsageError);
  });

  it('knows --list and --help', () => {
    expect(parseBenchArgs(['--list'], {}).list).toBe(true);
    expect(parseBenchArgs(['--help'], {}).help).toBe(true);
  });
});
