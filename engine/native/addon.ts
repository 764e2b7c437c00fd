/**
 * Where the native mmap helper (mmap.c) lives once built, and whether this run may use it.
 *
 * The file name carries the digest of mmap.c, so a helper built from older source is never loaded:
 * after a change to mmap.c, `npm run build:native` (or any `npm install`) builds the new one.
 * TERNFORGE_HASH_IO picks the hashing path: `mmap` (require the helper), `read` (never use it), or
 * unset (the helper when it is built, else read(2)).
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { err, ok, type Result } from '../result.ts';

export const MMAP_SOURCE = join(import.meta.dirname, 'mmap.c');
export const MMAP_BUILD_DIR = join(import.meta.dirname, 'build');

/** The path the helper built from the current mmap.c has. */
export function expectedMmapAddon(): string {
  const digest = createHash('sha256').update(readFileSync(MMAP_SOURCE)).digest('hex').slice(0, 16);
  return join(MMAP_BUILD_DIR, `mmap-${digest}.node`);
}

/** How big files are read for hashing: the helper's path, or null for read(2); an error says why not. */
export function mmapAddonForHashing(env: NodeJS.ProcessEnv = process.env, path = expectedMmapAddon()): Result<string | null, string> {
  const mode = env.TERNFORGE_HASH_IO ?? '';
  if (mode === 'read') return ok(null);
  if (mode !== '' && mode !== 'mmap') return err(`must be "mmap" or "read", not ${JSON.stringify(mode)}`);
  if (existsSync(path)) return ok(path);
  if (mode === 'mmap') return err(`"mmap", but the native helper ${path} is not built from the current mmap.c: run npm run build:native`);
  return ok(null);
}
