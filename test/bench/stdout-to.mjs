// Runs the CLI named next on the command line with its stdout on the file (or FIFO) named first (fd 1
// reopened), for test/bench/access-log-ab.ts: the access log's cost with stdout a regular file
// (`docker run > file`, systemd's StandardOutput=file:) or /dev/null (the line built and written,
// nobody reading).
//   node test/bench/stdout-to.mjs /dev/null dist/cli.js serve ...
import { closeSync, openSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

const target = process.argv[2];
closeSync(1);
openSync(target, 'a'); // the lowest free descriptor: 1
process.argv.splice(1, 2); // argv[1] is now the CLI's path, as if it had been started itself
await import(pathToFileURL(process.argv[1]).href);
