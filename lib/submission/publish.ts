/**
 * Publishing an emitted submission at a stable path (`dist/<profile>/` or `--out`): a hard-link tree of
 * emit's committed outputs (copies where links are refused), swapped into place by rename so a reader
 * never sees half a directory. An existing directory is replaced only when it is a published
 * submission (it has an architecture.json of ours) or empty; anything else is refused.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { randomSuffix } from '../../engine/fs-atomic.ts';
import { err, ok, type Result } from '../../engine/result.ts';
import { listFiles } from './assemble.ts';
import { ARCHITECTURE } from './layout.ts';
import { linkOrCopy } from './wheels.ts';

function isPublishedSubmission(dir: string): boolean {
  if (readdirSync(dir).length === 0) return true;
  try {
    return (JSON.parse(readFileSync(join(dir, ARCHITECTURE), 'utf8')) as { format?: unknown }).format === 'ternforge-architecture/1';
  } catch {
    return false;
  }
}

/** Mirror `src` at `dest` with hard links; returns the number of files. */
export function publishSubmission(src: string, dest: string): Result<{ files: number; linked: number }, { path: string; detail: string }> {
  if (existsSync(dest) && !isPublishedSubmission(dest)) return err({ path: dest, detail: 'exists and is not a published ternforge submission; not replacing it' });
  mkdirSync(dirname(dest), { recursive: true });
  const tmp = `${dest}.tmp-${randomSuffix()}`;
  let linked = 0;
  const files = listFiles(src);
  try {
    for (const f of files) {
      mkdirSync(dirname(join(tmp, f)), { recursive: true });
      if (linkOrCopy(join(src, f), join(tmp, f)) === 'linked') linked++;
    }
    const old = `${dest}.old-${randomSuffix()}`;
    if (existsSync(dest)) renameSync(dest, old);
    renameSync(tmp, dest);
    rmSync(old, { recursive: true, force: true });
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
  return ok({ files: files.length, linked });
}
