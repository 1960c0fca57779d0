import { describe, expect, it } from 'vitest';
import { parseFlags } from '../../src/config/flags.js';

const FLAGS = ['--port', '--host'];

describe('parseFlags', () => {
  it('reads --flag value and --flag=value, trimmed; of a repeated flag the last wins', () => {
    const { values, problems } = parseFlags(['--port', ' 80 ', '--host=h', '--port=81'], FLAGS);
    expect(problems).toEqual([]);
    expect([...values]).toEqual([
      ['--port', '81'],
      ['--host', 'h'],
    ]);
  });

  it('takes a value that starts with a single dash', () => {
    expect(parseFlags(['--port', '-1'], FLAGS).values.get('--port')).toBe('-1');
  });

  it('reports every problem at once', () => {
    const { problems } = parseFlags(['serve', '--nope', '1', 'x', '-p', '--host'], FLAGS);
    const allowed = 'allowed: --port, --host (as --flag value or --flag=value)';
    expect(problems).toEqual([
      `unexpected argument "serve"; ${allowed}`,
      `unknown flag --nope; ${allowed}`,
      `unexpected argument "x"; ${allowed}`,
      `unknown flag -p; ${allowed}`,
      'flag --host needs a value: --host VALUE or --host=VALUE',
    ]);
  });

  it('takes nothing after --', () => {
    expect(parseFlags(['--', '--port', '1'], FLAGS).problems).toEqual([
      'unexpected argument "--"; allowed: --port, --host (as --flag value or --flag=value)',
      'unexpected argument "1"; allowed: --port, --host (as --flag value or --flag=value)',
    ]);
  });

  it('says no more about the word after a failed flag, which was meant as its value', () => {
    expect(parseFlags(['--ports', '1'], FLAGS).problems).toHaveLength(1);
    expect(parseFlags(['--port', '--host', 'x'], FLAGS).problems).toEqual(['flag --port needs a value: --port VALUE or --port=VALUE']);
  });
});
