/** What the generators in scripts/ share: write generated files, or with --check report the stale ones. */
import { readFile, writeFile } from 'node:fs/promises';
import { relative } from 'node:path';

export interface Generated {
  path: string;
  text: string;
}

/**
 * Writes each file whose text differs (returns how many changed), or with `check` writes nothing, names
 * each stale file on stderr with the command that regenerates it, and exits 1 when any is stale.
 */
export async function writeOrCheck(files: readonly Generated[], root: string, check: boolean, command: string): Promise<number> {
  let stale = 0;
  for (const { path, text } of files) {
    const current = await readFile(path, 'utf8').catch(() => null);
    if (current === text) continue;
    stale++;
    if (check) console.error(`stale: ${relative(root, path)} (run ${command})`);
    else await writeFile(path, text);
  }
  if (check && stale > 0) process.exit(1);
  return stale;
}
