/**
 * `gc`: delete store dirs and run-cache entries that no profile's lock references, and orphaned temp
 * dirs. Runs under the workspace lock.
 */
import { readdirSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { FileHasher } from './hash.ts';
import { type SchemaSet } from './json-io.ts';
import { ProfileLock } from './lock-file.ts';
import type { Workspace } from './store.ts';

export interface GcResult {
  storeDirs: string[];
  runEntries: string[];
  freedBytes: number;
}

function dirs(path: string): string[] {
  try {
    return readdirSync(path, { withFileTypes: true }).filter((e) => e.isDirectory()).map((e) => e.name).sort();
  } catch {
    return [];
  }
}

function sizeOf(path: string): number {
  const st = statSync(path, { throwIfNoEntry: false });
  if (st === undefined) return 0;
  if (!st.isDirectory()) return st.size;
  return readdirSync(path).reduce((n, e) => n + sizeOf(join(path, e)), 0);
}

export function collectGarbage(ws: Workspace, schemas: SchemaSet, hasher: FileHasher): GcResult {
  const keys = new Set<string>();
  const outputs = new Set<string>();
  for (const profile of dirs(ws.dir)) {
    const lock = ProfileLock.read(ws.lockFile(profile), profile, schemas);
    if (!lock.ok) continue;
    for (const stage of lock.value.stages()) {
      const e = lock.value.get(stage)!;
      keys.add(e.key);
      outputs.add(`${stage}/${e.outputDigest}`);
    }
  }
  const result: GcResult = { storeDirs: [], runEntries: [], freedBytes: 0 };
  const store = join(ws.dir, 'store');
  for (const stage of dirs(store)) {
    for (const digest of dirs(join(store, stage))) {
      if (outputs.has(`${stage}/${digest}`)) continue;
      const p = join(store, stage, digest);
      result.freedBytes += sizeOf(p);
      rmSync(p, { recursive: true, force: true });
      hasher.forgetUnder(p);
      result.storeDirs.push(`store/${stage}/${digest}`);
    }
  }
  const runs = join(ws.dir, 'runs');
  for (const prefix of dirs(runs)) {
    for (const f of readdirSync(join(runs, prefix)).sort()) {
      if (keys.has(f.replace(/\.json$/, ''))) continue;
      const p = join(runs, prefix, f);
      result.freedBytes += sizeOf(p);
      rmSync(p, { force: true });
      result.runEntries.push(`runs/${prefix}/${f}`);
    }
  }
  rmSync(ws.tmpDir, { recursive: true, force: true });
  return result;
}
