// Runs the CLI named next on the command line with its stdout on /dev/null (fd 1 reopened), for
// test/bench/access-log-ab.ts: the access log's cost without any reader of it.
//   node test/bench/devnull-stdout.mjs dist/cli.js serve ...
import { closeSync, openSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

closeSync(1);
openSync('/dev/null', 'w'); // the lowest free descriptor: 1
process.argv.splice(1, 1); // argv[1] is now the CLI's path, as if it had been started itself
await import(pathToFileURL(process.argv[1]).href);
