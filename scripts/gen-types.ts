/**
 * Generate TypeScript types from every JSON Schema in schemas/ (the source of truth) into
 * schemas/generated/. `--check` writes nothing and exits 1 when a generated file is stale.
 */
import { compileFromFile } from 'json-schema-to-typescript';
import { readdir, mkdir } from 'node:fs/promises';
import { join, relative, basename, dirname } from 'node:path';
import { writeOrCheck } from './generated-files.ts';

const root = join(import.meta.dirname, '..');
const schemaDir = join(root, 'schemas');
const outDir = join(schemaDir, 'generated');

async function schemaFiles(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const entry of (await readdir(dir, { withFileTypes: true })).sort((a, b) => a.name.localeCompare(b.name))) {
    const p = join(dir, entry.name);
    if (entry.isDirectory() && entry.name !== 'generated') out.push(...(await schemaFiles(p)));
    else if (entry.name.endsWith('.schema.json')) out.push(p);
  }
  return out;
}

/** Generated text for one schema file. */
export async function generate(file: string): Promise<{ path: string; text: string }> {
  const name = basename(file, '.schema.json');
  const text = await compileFromFile(file, {
    cwd: dirname(file),
    bannerComment: `/* Generated from schemas/${relative(schemaDir, file)} by scripts/gen-types.ts. Do not edit. */`,
    declareExternallyReferenced: true,
    additionalProperties: false,
    style: { singleQuote: true, printWidth: 110 },
  });
  return { path: join(outDir, `${name}.ts`), text };
}

export async function generateAll(): Promise<Array<{ path: string; text: string }>> {
  return Promise.all((await schemaFiles(schemaDir)).map(generate));
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const check = process.argv.includes('--check');
  await mkdir(outDir, { recursive: true });
  const stale = await writeOrCheck(await generateAll(), root, check, 'npm run gen:types');
  if (!check) console.log(`generated ${relative(root, outDir)}/ (${stale} changed)`);
}
