// ESLint (flat config) with typescript-eslint's type-aware rules: the ones that catch what a
// Node service gets wrong (a promise nobody awaits, an async callback where a sync one is
// expected), plus the recommended sets. Formatting is Prettier's, not ESLint's.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'helm/**', 'coverage/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: {
      parserOptions: { projectService: { allowDefaultProject: ['vitest.config.ts'] }, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': ['error', { checksVoidReturn: { arguments: false, attributes: false } }],
      // Tiers answer a value or a promise (undici's CacheStore shape), so awaiting a value is meant.
      '@typescript-eslint/await-thenable': 'off',
      '@typescript-eslint/consistent-type-imports': ['error', { fixStyle: 'inline-type-imports' }],
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' }],
      '@typescript-eslint/no-explicit-any': 'off',
      eqeqeq: ['error', 'always'],
      'no-console': 'off',
      // Past five, a call site cannot be read without the signature: pass the exchange, an options
      // object or a named record instead (CONVENTIONS: "the caller owns the outcome object").
      'max-params': ['error', 5],
      // Twice what most functions here are (under 40): past it, a function does more than one thing.
      'max-lines-per-function': ['error', { max: 80, skipBlankLines: true, skipComments: true }],
    },
  },
  {
    // A test file is one `describe` callback of many cases, and the bench's drivers take what a
    // scenario varies (server, load, seconds, headers…) as arguments: one more is allowed there.
    files: ['test/**/*.ts'],
    rules: { 'max-params': ['error', 6], 'max-lines-per-function': 'off' },
  },
  {
    files: ['**/*.js', '**/*.mjs', '**/*.cjs'],
    ...tseslint.configs.disableTypeChecked,
    rules: { ...tseslint.configs.disableTypeChecked.rules, '@typescript-eslint/no-require-imports': 'off' },
    languageOptions: {
      parserOptions: { projectService: false },
      globals: { process: 'readonly', console: 'readonly', URL: 'readonly', require: 'readonly', module: 'writable', __dirname: 'readonly' },
    },
  },
);
