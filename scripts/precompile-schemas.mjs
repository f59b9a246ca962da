// Part of `npm run build`: writes dist/src/core/validators.cjs, the published schemas' validators as
// code, which src/core/schema.ts loads instead of compiling the schemas at every start.
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { PUBLISHED_SCHEMAS } from '../dist/src/cli/schema.js';
import { precompiledSource } from '../dist/src/core/schema.js';

writeFileSync(
  fileURLToPath(new globalThis.URL('../dist/src/core/validators.cjs', import.meta.url)),
  precompiledSource(Object.values(PUBLISHED_SCHEMAS)),
);
