/** This build's version, from package.json (beside dist/ in the image and in a checkout). */
import { createRequire } from 'node:module';

export const VERSION: string = (createRequire(import.meta.url)('../package.json') as { version: string }).version;
