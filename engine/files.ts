import { constants, copyFileSync, linkSync, readdirSync } from 'node:fs';
import { join, relative } from 'node:path';

/** Every regular file (or link) under `dir`, as sorted `/`-separated paths relative to `dir`. */
export function listFiles(dir: string): string[] {
  const out: string[] = [];
  const walk = (d: string): void => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else out.push(relative(dir, p));
    }
  };
  walk(dir);
  return out.sort();
}

/**
 * Hard-link `src` at `dst`; copy (reflinked where the file system can) only where a link is refused:
 * another file system, no permission, too many links, no link support. Any other error is thrown.
 */
export function linkOrCopy(src: string, dst: string): 'linked' | 'copied' {
  try {
    linkSync(src, dst);
    return 'linked';
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code !== 'EXDEV' && code !== 'EPERM' && code !== 'EMLINK' && code !== 'ENOTSUP') throw e;
    copyFileSync(src, dst, constants.COPYFILE_FICLONE);
    return 'copied';
  }
}
