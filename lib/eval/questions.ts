/**
 * Question set files: read, validated against `schemas/eval-question.schema.json`, then checked for
 * what the schema cannot say (unique ids, answer letters within the options, a function name for
 * functional tests). Each file declares its `role` and `source`; the sweep refuses `evaluation` sets.
 */
import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { ENGINE_SCHEMA_DIR, SchemaSet } from '../../engine/json-io.ts';
import type { Failure } from '../../engine/failure.ts';
import type { EvalFailure } from '../failures.ts';
import { err, ok, type Result } from '../../engine/result.ts';
import type { QuestionSet } from '../../schemas/generated/eval-question.ts';
import { OPTION_LETTERS } from './choice.ts';

export const QUESTION_SCHEMA = 'eval-question.schema.json';

/** A validated question set and where it came from. */
export interface LoadedSet {
  /** The file, as given (repository-relative when `root` was given). */
  readonly path: string;
  /** sha256 of the file's bytes: the report names exactly which questions were asked. */
  readonly sha256: string;
  readonly set: QuestionSet;
}

let schemas: SchemaSet | undefined;

/** A set file's bytes, read and checked against its schema; `shown` is the path as reports name it. */
export interface SetFile {
  readonly shown: string;
  readonly sha256: string;
  readonly value: unknown;
}

/** Read one set file (question or answer set) and check it against `schema` (relative to schemas/). */
export async function readSetFile(path: string, root: string | undefined, schema: string): Promise<Result<SetFile, Failure>> {
  const shown = root === undefined ? path : relative(root, path);
  let bytes: Buffer;
  try {
    bytes = await readFile(path);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return err({ reason: 'missing-input', stage: 'eval', path: shown });
    throw e;
  }
  let value: unknown;
  try {
    value = JSON.parse(bytes.toString('utf8'));
  } catch (e) {
    return err({ reason: 'invalid-json', path: shown, errors: [`not JSON: ${(e as Error).message}`] });
  }
  schemas ??= new SchemaSet(ENGINE_SCHEMA_DIR);
  const errors = schemas.validate(schema, value);
  if (errors.length > 0) return err({ reason: 'invalid-json', path: shown, errors });
  return ok({ shown, sha256: createHash('sha256').update(bytes).digest('hex'), value });
}

/** Read and check one question set file. */
export async function loadQuestionSet(path: string, root?: string): Promise<Result<LoadedSet, Failure | EvalFailure>> {
  const file = await readSetFile(path, root, QUESTION_SCHEMA);
  if (!file.ok) return file;
  const { shown, sha256, value } = file.value;
  const set = value as QuestionSet;
  const seen = new Set<string>();
  for (const q of set.questions) {
    const bad = (detail: string): Result<never, EvalFailure> => err({ reason: 'eval-question-invalid', path: shown, id: q.id, detail });
    if (seen.has(q.id)) return bad('duplicate id');
    seen.add(q.id);
    if (q.kind === 'choice' && OPTION_LETTERS.indexOf(q.answer) >= q.options.length) {
      return bad(`answer ${q.answer} is beyond the ${q.options.length} options`);
    }
    if (q.kind === 'code' && q.tests.some((t) => t.type === 'functional') && q.fnName === undefined) {
      return bad('functional tests need fnName');
    }
  }
  return ok({ path: shown, sha256, set });
}

/** Load several files; the first failure stops. */
export async function loadQuestionSets(paths: readonly string[], root?: string): Promise<Result<LoadedSet[], Failure | EvalFailure>> {
  const out: LoadedSet[] = [];
  for (const p of paths) {
    const r = await loadQuestionSet(root === undefined ? p : join(root, p), root);
    if (!r.ok) return r;
    out.push(r.value);
  }
  return ok(out);
}

/** Every `*.json` question set in a directory, sorted by name. */
export async function questionFiles(dir: string): Promise<string[]> {
  return (await readdir(dir)).filter((f) => f.endsWith('.json')).sort().map((f) => join(dir, f));
}
