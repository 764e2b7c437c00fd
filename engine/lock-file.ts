/**
 * The per-profile lock file `.ternforge/<profile>/lock.json`: what was observed when each stage last
 * produced its current outputs. Human-readable (pretty, sorted keys), `schema: 1`, rewritten only when
 * an entry changes, and always written after the outputs it names are in place.
 */
import { readFileSync } from 'node:fs';
import type { LockEntry, LockFile } from '../schemas/generated/lock-file.ts';
import { prettyJson } from './digest.ts';
import type { Failure } from './failure.ts';
import { writeFileAtomicSync } from './fs-atomic.ts';
import { ENGINE_SCHEMAS, readJsonFile, type SchemaSet } from './json-io.ts';
import { ok, type Result } from './result.ts';

export type { LockEntry, LockFile };

export class ProfileLock {
  readonly #path: string;
  readonly #data: LockFile;
  readonly #schemas: SchemaSet;

  private constructor(path: string, data: LockFile, schemas: SchemaSet) {
    this.#path = path;
    this.#data = data;
    this.#schemas = schemas;
  }

  /** Read and validate; a missing file is an empty lock. An invalid one is an `invalid-json` failure. */
  static read(path: string, profile: string, schemas: SchemaSet, root?: string): Result<ProfileLock, Failure> {
    const read = readJsonFile<LockFile>(path, schemas, ENGINE_SCHEMAS.lockFile, root);
    if (!read.ok) return read;
    return ok(new ProfileLock(path, read.value ?? { schema: 1, profile, stages: {} }, schemas));
  }

  get(stage: string): LockEntry | undefined {
    return this.#data.stages[stage];
  }

  stages(): string[] {
    return Object.keys(this.#data.stages).sort();
  }

  /**
   * Set one entry and rewrite the file (temp + rename) only when its text changes. What is written is
   * validated first: a lock the next run would reject is a bug, caught here (and the first run of a
   * workdir compiles the validator the next one reads with, instead of leaving that to a no-op run).
   */
  set(stage: string, entry: LockEntry): void {
    this.#data.stages[stage] = entry;
    const errors = this.#schemas.validate(ENGINE_SCHEMAS.lockFile, this.#data);
    if (errors.length > 0) throw new Error(`the lock entry for ${stage} breaks ${ENGINE_SCHEMAS.lockFile}: ${errors.join('; ')}`);
    const text = prettyJson(this.#data);
    let current: string | null = null;
    try {
      current = readFileSync(this.#path, 'utf8');
    } catch {
      current = null;
    }
    if (current !== text) writeFileAtomicSync(this.#path, text);
  }
}
