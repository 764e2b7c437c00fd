/**
 * Top-level links: `<workdir>/<name>` -> `.ternforge/<profile>/<stage>/outputs/<path>` for the current
 * profile, e.g. weights -> pack/weights. Replaced atomically; a link whose target does not exist yet
 * is left as it was; a real file or directory in its place is never touched.
 */
import { existsSync, lstatSync } from 'node:fs';
import { join, relative } from 'node:path';
import { symlinkAtomic } from './fs-atomic.ts';
import type { Workspace } from './store.ts';

export function refreshLinks(ws: Workspace, profile: string, links: Readonly<Record<string, string>>, note: (line: string) => void): void {
  for (const [name, target] of Object.entries(links)) {
    const [stage, ...rest] = target.split('/');
    const abs = join(ws.outputsLink(profile, stage!), ...rest);
    if (!existsSync(abs)) continue;
    const link = join(ws.workdir, name);
    const st = lstatSync(link, { throwIfNoEntry: false });
    if (st !== undefined && !st.isSymbolicLink()) {
      note(`not linking ${name}: ${link} exists and is not a symlink`);
      continue;
    }
    symlinkAtomic(relative(ws.workdir, abs), link);
  }
}
