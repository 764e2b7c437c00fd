/**
 * Compile every WebAssembly text kernel (`lib/**\/*.wat`, the source of truth) into a TypeScript module
 * beside it (`<name>.wasm.ts`, the binary as base64), with wabt. `--check` writes nothing and exits 1 when a
 * generated file is stale. Run by `npm run gen:wasm`; test/wasm-kernels.test.ts fails when one is stale.
 */
import { readdir, readFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import initWabt from 'wabt';
import { writeOrCheck } from './generated-files.ts';

const root = join(import.meta.dirname, '..');
const FEATURES = { simd: true };

async function watFiles(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const entry of (await readdir(dir, { withFileTypes: true })).sort((a, b) => a.name.localeCompare(b.name))) {
    const p = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...(await watFiles(p)));
    else if (entry.name.endsWith('.wat')) out.push(p);
  }
  return out;
}

/** The generated TypeScript for one .wat file. */
export async function generate(file: string): Promise<{ path: string; text: string }> {
  const wabt = await initWabt();
  const mod = wabt.parseWat(relative(root, file), await readFile(file, 'utf8'), FEATURES);
  try {
    mod.validate();
    const { buffer } = mod.toBinary({ log: false, write_debug_names: false });
    const b64 = Buffer.from(buffer).toString('base64');
    const lines = b64.match(/.{1,100}/g) ?? [];
    const text = [
      `/* Generated from ${relative(root, file)} by scripts/gen-wasm.ts. Do not edit. */`,
      `export const WASM_BYTES = new Uint8Array(`,
      `  Buffer.from(`,
      ...lines.map((l, i) => `    '${l}'${i < lines.length - 1 ? ' +' : ','}`),
      `    'base64',`,
      `  ),`,
      `);`,
      '',
    ].join('\n');
    return { path: file.replace(/\.wat$/, '.wasm.ts'), text };
  } finally {
    mod.destroy();
  }
}

export async function generateAll(): Promise<Array<{ path: string; text: string }>> {
  return Promise.all((await watFiles(join(root, 'lib'))).map(generate));
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const check = process.argv.includes('--check');
  const stale = await writeOrCheck(await generateAll(), root, check, 'npm run gen:wasm');
  if (!check) console.log(`generated ${stale} wasm module(s)`);
}
