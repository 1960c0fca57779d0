// Preloaded (NODE_OPTIONS=--require) into a `node dist/cli.js` under test: makes the `typescript`
// package unresolvable, as it is in the production image (npm ci --omit=dev), so a test sees the
// built command fail if it needs TypeScript at run time.
const Module = require('node:module');
const resolve = Module._resolveFilename;
Module._resolveFilename = function (request, ...rest) {
  if (request === 'typescript' || request.startsWith('typescript/')) {
    const err = new Error(`Cannot find module '${request}' (hidden by test/helpers/no-typescript.cjs)`);
    err.code = 'MODULE_NOT_FOUND';
    throw err;
  }
  return resolve.call(this, request, ...rest);
};
