/**
 * Published trees: `<workdir>/<dest>` (e.g. `dist/tiny`) as a copy of a stage's current outputs
 * (reflinked where the filesystem can, `COPYFILE_FICLONE`, else copied), refreshed after every run, so the
 * submission sits at a stable path even when its stage was fresh or restored from the run cache. A real
 * directory of its own files, neither a symlink nor hard links: editing a file under dist/ (or a program
 * run from it: serve.sh writes its venv beside itself) must not be able to change the content store, whose
 * files must never change under their digest. Read-only permissions would not do: root writes anyway. Built beside the
 * destination and swapped in by rename. Which output digest each destination mirrors is recorded in
 * `.ternforge/<profile>/published.json`; a destination that is not recorded there is never replaced.
 */
import { constants, copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, realpathSync, renameSync, rmSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { listFiles } from './files.ts';
import { randomSuffix, writeFileAtomicSync } from './fs-atomic.ts';
import { currentOutputs, EVIDENCE_FILE, type Workspace } from './store.ts';

export function refreshPublished(ws: Workspace, profile: string, publish: Readonly<Record<string, string>>, note: (line: string) => void): void {
  const recordPath = join(ws.workdir, '.ternforge', profile, 'published.json');
  let record: Record<string, string> = {};
  try {
    const parsed: unknown = JSON.parse(readFileSync(recordPath, 'utf8'));
    if (parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed)) record = parsed as Record<string, string>;
  } catch {
    record = {};
  }
  let changed = false;
  for (const [template, stage] of Object.entries(publish)) {
    const rel = template.replaceAll('{profile}', profile);
    const src = currentOutputs(ws, profile, stage);
    if (src === null || !existsSync(src)) continue;
    const digest = basename(realpathSync(src));
    const dest = join(ws.workdir, rel);
    if (record[rel] === digest && existsSync(dest)) continue;
    if (existsSync(dest) && record[rel] === undefined && readdirSync(dest).length > 0) {
      note(`not publishing ${rel}: it exists and was not published by ternforge`);
      continue;
    }
    mkdirSync(dirname(dest), { recursive: true });
    const tmp = `${dest}.tmp-${randomSuffix()}`;
    try {
      for (const f of listFiles(src)) {
        if (f === EVIDENCE_FILE) continue;
        mkdirSync(dirname(join(tmp, f)), { recursive: true });
        copyFileSync(join(src, f), join(tmp, f), constants.COPYFILE_FICLONE); // keeps the mode (serve.sh's x bit)
      }
      const old = `${dest}.old-${randomSuffix()}`;
      if (existsSync(dest)) renameSync(dest, old);
      renameSync(tmp, dest);
      rmSync(old, { recursive: true, force: true });
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
    record[rel] = digest;
    changed = true;
    note(`published ${rel} (${stage} outputs ${digest.slice(0, 12)})`);
  }
  if (changed) writeFileAtomicSync(recordPath, `${JSON.stringify(record, null, 2)}\n`);
}
