/**
 * The committed lock of a profile's pinned sources, `profiles/<profile>.lock.json` (beside the profile),
 * in the manner of a package lock file or dvc's `rev_lock`: a stage that declares `pins` names sources by a
 * ref that may move (a branch, a tag); the lock records the commit each one resolved to and every file's
 * size and hash. The lock's entries for a stage enter its key; the stage reads exactly the locked commit.
 *
 * An entry stands while its request (kind, repo, ref, files) equals the profile's; a request with no
 * standing entry is resolved by the next run of the stage (or `tsx pipeline.ts lock`), and only
 * `lock --update` re-resolves standing ones. Pretty JSON, sorted keys, validated when read and written.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { LockedFile, LockedSource, PinLockFile, PinRequest } from '../schemas/generated/pin-lock.ts';
import { canonicalJson, prettyJson, type JsonValue } from './digest.ts';
import type { Failure } from './failure.ts';
import { writeFileAtomicSync } from './fs-atomic.ts';
import { ENGINE_SCHEMAS, readJsonFile, type SchemaSet } from './json-io.ts';
import { ok, type Result } from './result.ts';

export type { LockedFile, LockedSource, PinLockFile, PinRequest };

/** Where a profile's pin lock lives: beside the profile, committed with it. */
export function pinLockPath(root: string, profile: string): string {
  return join(root, 'profiles', `${profile}.lock.json`);
}

/** A request as the lock stores it (absent `files` omitted), for comparison. */
function requestJson(r: PinRequest): string {
  return canonicalJson((r.files === undefined ? { name: r.name, kind: r.kind, repo: r.repo, ref: r.ref } : { ...r, files: [...r.files] }) as JsonValue);
}

export class PinLock {
  readonly path: string;
  readonly #data: PinLockFile;
  readonly #schemas: SchemaSet;

  private constructor(path: string, data: PinLockFile, schemas: SchemaSet) {
    this.path = path;
    this.#data = data;
    this.#schemas = schemas;
  }

  /** Read and validate; a missing file is an empty lock, an invalid one an `invalid-json` failure. */
  static read(root: string, profile: string, schemas: SchemaSet): Result<PinLock, Failure> {
    const path = pinLockPath(root, profile);
    const read = readJsonFile<PinLockFile>(path, schemas, ENGINE_SCHEMAS.pinLock, root);
    if (!read.ok) return read;
    return ok(new PinLock(path, read.value ?? { schema: 1, profile, stages: {} }, schemas));
  }

  /** The stage's locked sources (all of them, standing or not). */
  entries(stage: string): Readonly<Record<string, LockedSource>> {
    return this.#data.stages[stage] ?? {};
  }

  /** The entry standing for a request: same name and an equal request; undefined when none. */
  standing(stage: string, request: PinRequest): LockedSource | undefined {
    const e = this.#data.stages[stage]?.[request.name];
    return e !== undefined && requestJson(e.request) === requestJson(request) ? e : undefined;
  }

  /** The requests without a standing entry (new sources, or ones whose ref or files the profile changed). */
  pending(stage: string, requests: readonly PinRequest[]): PinRequest[] {
    return requests.filter((r) => this.standing(stage, r) === undefined);
  }

  /**
   * Record resolved sources for a stage, drop entries for sources the stage no longer requests, and
   * rewrite the file (temp + rename) when its text changes. What is written is validated first.
   */
  update(stage: string, requests: readonly PinRequest[], resolved: Readonly<Record<string, LockedSource>>): void {
    const next: Record<string, LockedSource> = {};
    for (const r of [...requests].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))) {
      const e = resolved[r.name] ?? this.standing(stage, r);
      if (e !== undefined) next[r.name] = e;
    }
    if (Object.keys(next).length > 0) this.#data.stages[stage] = next;
    else delete this.#data.stages[stage];
    const errors = this.#schemas.validate(ENGINE_SCHEMAS.pinLock, this.#data);
    if (errors.length > 0) throw new Error(`the pin lock for ${stage} breaks ${ENGINE_SCHEMAS.pinLock}: ${errors.join('; ')}`);
    const text = prettyJson(this.#data);
    let current: string | null;
    try {
      current = readFileSync(this.path, 'utf8');
    } catch {
      current = null;
    }
    if (current !== text) writeFileAtomicSync(this.path, text);
  }
}

/** What changed for one source between two locks, as `lock` prints it. */
export interface PinChange {
  stage: string;
  source: string;
  /** `new`: not locked before; `removed`: no longer requested; `changed`: another commit or other files; `same`. */
  change: 'new' | 'removed' | 'changed' | 'same';
  repo: string;
  ref: string;
  from?: string;
  to?: string;
  added: string[];
  removed: string[];
  /** Files at both commits whose size or hash differs. */
  modified: string[];
}

function sameFile(a: LockedFile, b: LockedFile): boolean {
  return a.size === b.size && a.sha256 === b.sha256 && a.git_sha1 === b.git_sha1;
}

/** Source by source, what `after` changes relative to `before` (both one stage's entries). */
export function diffPins(stage: string, before: Readonly<Record<string, LockedSource>>, after: Readonly<Record<string, LockedSource>>): PinChange[] {
  const out: PinChange[] = [];
  for (const source of [...new Set([...Object.keys(before), ...Object.keys(after)])].sort()) {
    const a = before[source];
    const b = after[source];
    const e = (b ?? a)!;
    const base = { stage, source, repo: e.request.repo, ref: e.request.ref };
    if (a === undefined) out.push({ ...base, change: 'new', to: b!.commit, added: Object.keys(b!.files).sort(), removed: [], modified: [] });
    else if (b === undefined) out.push({ ...base, change: 'removed', from: a.commit, added: [], removed: Object.keys(a.files).sort(), modified: [] });
    else {
      const added = Object.keys(b.files).filter((f) => a.files[f] === undefined).sort();
      const removed = Object.keys(a.files).filter((f) => b.files[f] === undefined).sort();
      const modified = Object.keys(b.files).filter((f) => a.files[f] !== undefined && !sameFile(a.files[f]!, b.files[f]!)).sort();
      const same = a.commit === b.commit && added.length + removed.length + modified.length === 0 && requestJson(a.request) === requestJson(b.request);
      out.push({ ...base, change: same ? 'same' : 'changed', from: a.commit, to: b.commit, added, removed, modified });
    }
  }
  return out;
}

/** Lines for one change: `fetch-model model (Qwen/Qwen3.5-4B@main): 851bf6e8... -> 0a1b2c3d...` then files. */
export function formatPinChange(c: PinChange): string[] {
  const head = `${c.stage} ${c.source} (${c.repo}@${c.ref})`;
  const lines =
    c.change === 'new' ? [`${head}: locked at ${c.to} (${c.added.length} files)`]
    : c.change === 'removed' ? [`${head}: removed (was ${c.from})`]
    : c.change === 'same' ? [`${head}: unchanged at ${c.to}`]
    : [`${head}: ${c.from} -> ${c.to}`];
  if (c.change === 'changed') {
    for (const f of c.added) lines.push(`  + ${f}`);
    for (const f of c.removed) lines.push(`  - ${f}`);
    for (const f of c.modified) lines.push(`  ~ ${f}`);
  }
  return lines;
}
