/**
 * Every JSON file the engine reads from disk passes ajv against its schema before it gets a type.
 * Schemas live in `schemas/` (the source of truth; types are generated into schemas/generated/).
 */
import { Ajv } from 'ajv';
import type { ValidateFunction } from 'ajv';
import standalone from 'ajv/dist/standalone/index.js';
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join, relative } from 'node:path';
import { sha256 } from './digest.ts';
import { writeFileAtomicSync } from './fs-atomic.ts';
import type { Failure } from './failure.ts';
import { err, ok, type Result } from './result.ts';

/** The engine's own schemas, relative to the engine repository's `schemas/`. */
export const ENGINE_SCHEMAS = {
  lockFile: 'engine/lock-file.schema.json',
  pinLock: 'engine/pin-lock.schema.json',
  runCacheEntry: 'engine/run-cache-entry.schema.json',
  workspaceLock: 'engine/workspace-lock.schema.json',
  hashCache: 'engine/hash-cache.schema.json',
  pythonEnvInfo: 'engine/python-env-info.schema.json',
  evidenceRecord: 'evidence-record.schema.json',
  stageKey: 'engine/stage-key.schema.json',
  outputListing: 'engine/output-listing.schema.json',
} as const;

/** Where the engine's own schemas are (this repository's schemas/, wherever the pipeline root is). */
export const ENGINE_SCHEMA_DIR = join(import.meta.dirname, '..', 'schemas');

const require = createRequire(import.meta.url);
const standaloneCode = standalone.default;
const AJV_VERSION = (require('ajv/package.json') as { version: string }).version;
const AJV_OPTIONS = { allErrors: true, strict: false, code: { source: true } } as const;

/** The validation function ajv's standalone code exports. */
type Validator = ((value: unknown) => boolean) & { errors?: ValidateFunction['errors'] };

/**
 * A set of JSON Schemas loaded from one directory, each registered under its path relative to that
 * directory (so `$ref: "stages/x.schema.json"` from a schema at the top resolves).
 *
 * Compiling schemas with ajv costs ~100 ms per process, more than a whole no-op run may take, so a
 * compiled validator is kept as ajv standalone code in `cacheDir/<digest>.cjs`, keyed by the ajv
 * version, its options and the text of every schema file involved (a code cache, like __pycache__).
 */
export class SchemaSet {
  readonly #dir: string;
  readonly #cacheDir: string | undefined;
  readonly #texts = new Map<string, string>();
  readonly #validators = new Map<string, Validator>();

  constructor(dir: string, cacheDir?: string) {
    this.#dir = dir;
    this.#cacheDir = cacheDir;
  }

  /** Validate `value` against the schema at `relPath`; errors as readable strings. */
  validate(relPath: string, value: unknown): string[] {
    const fn = this.#validator(relPath);
    if (fn(value)) return [];
    return (fn.errors ?? []).map((e) => `${e.instancePath || '/'} ${e.message ?? 'is invalid'}${e.params && 'additionalProperty' in e.params ? ` (${String(e.params.additionalProperty)})` : ''}`);
  }

  /** Throw when `value`, which this program made, fails the schema at `relPath`: a bug here, not bad input. `what` names it. */
  check(relPath: string, value: unknown, what: string): void {
    const errors = this.validate(relPath, value);
    if (errors.length > 0) throw new Error(`${what} fails its own schema (schemas/${relPath}): ${errors.join('; ')}`);
  }

  #validator(relPath: string): Validator {
    const known = this.#validators.get(relPath);
    if (known !== undefined) return known;
    const files = this.#closure(relPath);
    const digest = sha256(JSON.stringify([AJV_VERSION, AJV_OPTIONS, relPath, files.map((f) => [f, this.#texts.get(f)])]));
    const cached = this.#cacheDir === undefined ? undefined : join(this.#cacheDir, `${digest}.cjs`);
    let fn: Validator | undefined;
    if (cached !== undefined && existsSync(cached)) {
      try {
        // ajv compiles every validator with `new Function` itself; loading its standalone code the
        // same way skips the ~100 ms compile (the module loader would add ~10 ms per file under tsx).
        const mod: { exports: unknown } = { exports: {} };
        new Function('module', 'exports', 'require', readFileSync(cached, 'utf8'))(mod, mod.exports, require);
        fn = typeof mod.exports === 'function' ? (mod.exports as Validator) : undefined;
      } catch {
        fn = undefined; // a damaged cache file is recompiled below
      }
    }
    if (fn === undefined) {
      const ajv = new Ajv(AJV_OPTIONS);
      for (const f of files) {
        const schema = JSON.parse(this.#texts.get(f)!) as Record<string, unknown>;
        const id = typeof schema.$id === 'string' ? schema.$id : undefined;
        // Registered under its relative path; when its $id differs, ajv also knows it by that $id.
        ajv.addSchema({ ...schema, $id: f });
        if (id !== undefined && id !== f) ajv.addSchema({ $ref: f }, id);
      }
      const compiled = ajv.getSchema(relPath);
      if (compiled === undefined) throw new Error(`schema not registered: ${relPath}`);
      fn = compiled;
      if (cached !== undefined) {
        const code = standaloneCode(ajv, compiled).replace(/require\("(ajv\/[^"]+)"\)/g, (_m: string, mod: string) => `require(${JSON.stringify(require.resolve(mod))})`);
        writeFileAtomicSync(cached, code);
      }
    }
    this.#validators.set(relPath, fn);
    return fn;
  }

  /** The schema file and every file it $refs, transitively (texts loaded into #texts). */
  #closure(relPath: string): string[] {
    const seen: string[] = [];
    const visit = (f: string): void => {
      if (seen.includes(f)) return;
      seen.push(f);
      let text = this.#texts.get(f);
      if (text === undefined) {
        text = readFileSync(join(this.#dir, f), 'utf8');
        this.#texts.set(f, text);
      }
      for (const ref of fileRefs(JSON.parse(text))) visit(joinRel(f, ref));
    };
    visit(relPath);
    return seen.sort();
  }
}

/** Every file reference (`x.schema.json`, `../y.schema.json#/...`) inside a schema. */
function fileRefs(node: unknown): string[] {
  const out: string[] = [];
  const walk = (n: unknown): void => {
    if (Array.isArray(n)) n.forEach(walk);
    else if (n !== null && typeof n === 'object') {
      for (const [k, v] of Object.entries(n)) {
        if (k === '$ref' && typeof v === 'string' && !v.startsWith('#')) out.push(v.split('#')[0]!);
        else walk(v);
      }
    }
  };
  walk(node);
  return out;
}

function joinRel(from: string, ref: string): string {
  const parts = from.split('/').slice(0, -1);
  for (const seg of ref.split('/')) {
    if (seg === '..') parts.pop();
    else if (seg !== '.') parts.push(seg);
  }
  return parts.join('/');
}

const engineSchemas = new Map<string, SchemaSet>();
/** The engine's own schema set (lock, run cache, records, ...), compiled validators cached in `cacheDir`. */
export function engineSchemaSet(cacheDir?: string): SchemaSet {
  let set = engineSchemas.get(cacheDir ?? '');
  if (set === undefined) {
    set = new SchemaSet(ENGINE_SCHEMA_DIR, cacheDir);
    engineSchemas.set(cacheDir ?? '', set);
  }
  return set;
}

/**
 * Read and validate a JSON file. `null` when the file does not exist; `invalid-json` when it is not
 * JSON or fails the schema.
 */
export function readJsonFile<T>(path: string, schemas: SchemaSet, schema: string, root?: string): Result<T | null, Failure> {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return ok(null);
    throw e;
  }
  const shown = root === undefined ? path : relative(root, path);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    return err({ reason: 'invalid-json', path: shown, errors: [`not JSON: ${(e as Error).message}`] });
  }
  const errors = schemas.validate(schema, value);
  if (errors.length > 0) return err({ reason: 'invalid-json', path: shown, errors });
  return ok(value as T);
}
