/**
 * Where outputs live, and the run cache.
 *
 *   .ternforge/tmp/<stage>-<random>/          a stage writes here; removed on failure
 *   .ternforge/store/<stage>/<outputDigest>/  outputs kept by content (immutable once renamed in)
 *   .ternforge/<profile>/<stage>/outputs      symlink to the store dir, swapped by atomic rename
 *   .ternforge/<profile>/<stage>/evidence.json  record of the run that produced the current outputs
 *   .ternforge/runs/<key[:2]>/<key>.json      run cache: stage key -> output digest (+listing, record)
 */
import { lstatSync, mkdirSync, readdirSync, readlinkSync, renameSync, rmSync, statSync, type Dirent } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import type { OutputListing } from '../schemas/generated/output-listing.ts';
import type { RunCacheEntry } from '../schemas/generated/run-cache-entry.ts';
import { canonicalJson, prettyJson, sha256, type OutputDigest, type StageKey } from './digest.ts';
import type { Failure } from './failure.ts';
import { randomSuffix, symlinkAtomic, writeFileAtomicSync } from './fs-atomic.ts';
import type { FileHasher } from './hash.ts';
import { ENGINE_SCHEMAS, readJsonFile, type SchemaSet } from './json-io.ts';
import { err, ok, type Result } from './result.ts';

/** Left out of the output digest: a record about the outputs, not part of them. */
export const EVIDENCE_FILE = 'evidence.json';

/** The layout of one workspace's `.ternforge/`. */
export class Workspace {
  /** `<workdir>/.ternforge` */
  readonly dir: string;
  constructor(readonly workdir: string) {
    this.dir = join(workdir, '.ternforge');
  }
  get tmpDir(): string {
    return join(this.dir, 'tmp');
  }
  get hashCache(): string {
    return join(this.dir, 'hash-cache.json');
  }
  /** Probes a stage's `facts` keep across runs (engine/types.ts). */
  get factsCache(): string {
    return join(this.dir, 'cache');
  }
  get schemaCache(): string {
    return join(this.dir, 'schema-cache');
  }
  get runLock(): string {
    return join(this.dir, 'run.lock');
  }
  /** The content store: committed outputs, never written again (only linked, renamed or deleted by gc). */
  get storeRoot(): string {
    return join(this.dir, 'store');
  }
  storeDir(stage: string, digest: string): string {
    return join(this.storeRoot, stage, digest);
  }
  placeDir(profile: string, stage: string): string {
    return join(this.dir, profile, stage);
  }
  outputsLink(profile: string, stage: string): string {
    return join(this.placeDir(profile, stage), 'outputs');
  }
  evidencePath(profile: string, stage: string): string {
    return join(this.placeDir(profile, stage), EVIDENCE_FILE);
  }
  lockFile(profile: string): string {
    return join(this.dir, profile, 'lock.json');
  }
  runCacheEntry(key: string): string {
    return join(this.dir, 'runs', key.slice(0, 2), `${key}.json`);
  }
}

/** Digest of an output listing: sha256 of its canonical JSON. */
export function listingDigest(listing: OutputListing): OutputDigest {
  return sha256(canonicalJson(listing)) as OutputDigest;
}

/**
 * Hash every regular file under `dir` (through the stat cache) into a sorted listing. A top-level
 * evidence.json is left out; anything but files and directories is refused.
 */
export async function listOutputs(stage: string, dir: string, hasher: FileHasher): Promise<Result<OutputListing, Failure>> {
  const files: string[] = [];
  const walk = (d: string): Failure | null => {
    const entries: Dirent[] = readdirSync(d, { withFileTypes: true });
    for (const e of entries) {
      const p = join(d, e.name);
      const rel = relative(dir, p).split('\\').join('/');
      if (e.isDirectory()) {
        const f = walk(p);
        if (f !== null) return f;
      } else if (e.isFile()) {
        if (rel !== EVIDENCE_FILE) files.push(p);
      } else {
        return { reason: 'unsupported-output', stage, path: rel, kind: e.isSymbolicLink() ? 'symlink' : 'special file' };
      }
    }
    return null;
  };
  const bad = walk(dir);
  if (bad !== null) return err(bad);
  files.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  const digests = await hasher.hashAll(files);
  return ok(files.map((p, i) => ({ path: relative(dir, p).split('\\').join('/'), sha256: digests[i]!.sha256, size: digests[i]!.size })));
}

/** Whether a store dir still holds exactly the outputs of `digest` (stat cache: no rehash on a no-op). */
export async function storeIntact(stage: string, storeDir: string, digest: string, hasher: FileHasher): Promise<boolean> {
  try {
    if (!statSync(storeDir).isDirectory()) return false;
  } catch {
    return false;
  }
  const listing = await listOutputs(stage, storeDir, hasher);
  return listing.ok && listingDigest(listing.value) === digest;
}

/**
 * Move a finished temp dir into the store under its digest. When that entry already exists intact,
 * the temp dir is discarded (same bytes); a damaged entry is replaced.
 */
export async function commitToStore(ws: Workspace, stage: string, tmp: string, digest: OutputDigest, hasher: FileHasher): Promise<string> {
  const dest = ws.storeDir(stage, digest);
  if (await storeIntact(stage, dest, digest, hasher)) {
    rmSync(tmp, { recursive: true, force: true });
    hasher.forgetUnder(tmp);
    return dest;
  }
  try {
    lstatSync(dest);
    // Damaged: move it aside first, so the rename below cannot fail on a non-empty dir.
    const trash = join(ws.tmpDir, `trash-${stage}-${randomSuffix()}`);
    renameSync(dest, trash);
    rmSync(trash, { recursive: true, force: true });
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
  }
  mkdirSync(join(dest, '..'), { recursive: true });
  renameSync(tmp, dest);
  hasher.moveDir(tmp, dest);
  return dest;
}

/** Point `.ternforge/<profile>/<stage>/outputs` at a store dir (relative link, atomic swap). */
export function pointOutputs(ws: Workspace, profile: string, stage: string, storeDir: string): void {
  const link = ws.outputsLink(profile, stage);
  symlinkAtomic(relative(join(link, '..'), storeDir), link);
}

/** The store dir the outputs link points at, or null. */
export function currentOutputs(ws: Workspace, profile: string, stage: string): string | null {
  const link = ws.outputsLink(profile, stage);
  try {
    return resolve(join(link, '..'), readlinkSync(link));
  } catch {
    return null;
  }
}

/** Write the evidence record beside the outputs (temp + rename). */
export function writeEvidence(ws: Workspace, profile: string, stage: string, record: unknown): void {
  writeFileAtomicSync(ws.evidencePath(profile, stage), prettyJson(record));
}

/** The run cache: stage key -> outputs. Entries are validated on read; a bad one is deleted. */
export class RunCache {
  constructor(readonly ws: Workspace, readonly schemas: SchemaSet) {}

  /** A usable entry for `key`, or null (corrupt, dangling or mismatched entries are deleted). */
  async lookup(stage: string, key: StageKey, hasher: FileHasher): Promise<RunCacheEntry | null> {
    const path = this.ws.runCacheEntry(key);
    const read = readJsonFile<RunCacheEntry>(path, this.schemas, ENGINE_SCHEMAS.runCacheEntry);
    if (read.ok && read.value === null) return null;
    const entry = read.ok ? read.value : null;
    if (entry !== null && entry.key === key && entry.stage === stage && listingDigest(entry.listing) === entry.outputDigest && (await storeIntact(stage, this.ws.storeDir(stage, entry.outputDigest), entry.outputDigest, hasher))) {
      return entry;
    }
    rmSync(path, { force: true });
    return null;
  }

  write(entry: RunCacheEntry): void {
    writeFileAtomicSync(this.ws.runCacheEntry(entry.key), prettyJson(entry));
  }
}
