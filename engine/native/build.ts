/**
 * Builds engine/native/mmap.c into build/mmap-<source digest>.node (npm's postinstall runs this).
 *
 * The helper only makes hashing faster, so by default a failed build prints why and exits 0: the
 * engine then reads files with read(2). `--strict` (npm run build:native) exits 1 instead.
 * Needs a C compiler ($CC, else cc) on Linux or macOS; the Node-API headers come from the pinned
 * node-api-headers package.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, readdirSync, renameSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join, relative } from 'node:path';
import { MMAP_BUILD_DIR, MMAP_SOURCE, expectedMmapAddon } from './addon.ts';

const require = createRequire(import.meta.url);

function build(): string {
  if (process.platform !== 'linux' && process.platform !== 'darwin') throw new Error(`no mmap helper for ${process.platform}`);
  const { include_dir: include } = require('node-api-headers') as { include_dir: string };
  const target = expectedMmapAddon();
  mkdirSync(MMAP_BUILD_DIR, { recursive: true });
  const tmp = target.replace(/\.node$/, `.tmp-${process.pid}.node`); // require() loads only *.node as addons
  const cc = process.env.CC || 'cc';
  const args = ['-O2', '-Wall', '-shared', '-fPIC', `-I${include}`, MMAP_SOURCE, '-o', tmp];
  if (process.platform === 'darwin') args.push('-undefined', 'dynamic_lookup');
  const r = spawnSync(cc, args, { encoding: 'utf8' });
  try {
    if (r.error) throw new Error(`${cc}: ${r.error.message}`);
    if (r.status !== 0) throw new Error(`${cc} exited ${r.status}:\n${r.stderr.trim()}`);
    require(tmp); // loads, or says why it cannot
    renameSync(tmp, target);
  } finally {
    rmSync(tmp, { force: true });
  }
  // Helpers built from older sources are never loaded again.
  for (const name of readdirSync(MMAP_BUILD_DIR)) {
    if (join(MMAP_BUILD_DIR, name) !== target) rmSync(join(MMAP_BUILD_DIR, name), { force: true });
  }
  return target;
}

const strict = process.argv.includes('--strict');
try {
  const built = build();
  process.stderr.write(`ternforge: built ${relative(process.cwd(), built)} (files are hashed through mmap)\n`);
} catch (e) {
  process.stderr.write(`ternforge: the native mmap helper was not built: ${(e as Error).message}\n` +
    'ternforge: hashing will read files with read(2) instead (about 10% slower on 2 cores); see engine/README.md\n');
  process.exitCode = strict ? 1 : 0;
}
