/**
 * The stage key: a typed record of everything that decides a stage's outputs, hashed as canonical
 * JSON. `diffKeys` compares a current key record with the lock's, field by field, into StaleReason[].
 */
import { readdirSync, statSync } from 'node:fs';
import { isAbsolute, join, relative } from 'node:path';
import type { StageKeyData as StageKeyDataWire } from '../schemas/generated/stage-key.ts';
import { canonicalJson, sha256, type FileSha256, type JsonValue, type OutputDigest, type StageKey } from './digest.ts';
import type { Failure } from './failure.ts';
import type { FileHasher } from './hash.ts';
import type { LockedSource } from './pin-lock.ts';
import { err, ok, type Result } from './result.ts';
import type { StageDef, Tool } from './types.ts';

/** Bumped when the engine changes how stages run or outputs are laid out: every key changes. */
export const ENGINE_FORMAT = 1;

/** The in-memory key record (the persisted shape is schemas/engine/stage-key.schema.json). */
export interface StageKeyData {
  /** ENGINE_FORMAT when computed. */
  format: number;
  /** The stage's name. */
  stage: string;
  /** The stage's code: repository-relative path -> digest (sorted; directories expanded). */
  code: Record<string, FileSha256>;
  /** The stage's own profile section. */
  params: { [key: string]: JsonValue };
  /** Declared inputs: path as declared -> digest. */
  inputs: Record<string, FileSha256>;
  /** Direct upstream stage -> digest of its current outputs (early cutoff: not its key). */
  upstream: Record<string, OutputDigest>;
  /** Declared tool -> version. */
  tools: Partial<Record<Tool, string>>;
  /** Declared environment facts -> value. */
  facts: Record<string, string>;
  /** A stage with pinned sources: source name -> its lock entry. Absent for every other stage. */
  pins?: Record<string, LockedSource>;
}

// A compile-time check, no cast: the in-memory record must stay assignable to the persisted shape that
// schemas/engine/stage-key.schema.json generates (a field the schema requires that this record lacks, or
// holds as another type, fails the type check; with the cast it had, nothing did).
const _wireCheck = (k: StageKeyData): StageKeyDataWire => k;
void _wireCheck;

export function stageKey(data: StageKeyData): StageKey {
  return sha256(canonicalJson(data)) as StageKey;
}

/** Files under a path, recursively, sorted; __pycache__ and *.pyc skipped. */
function expand(abs: string): string[] {
  const st = statSync(abs);
  if (!st.isDirectory()) return [abs];
  const out: string[] = [];
  for (const e of readdirSync(abs, { withFileTypes: true })) {
    if (e.name === '__pycache__' || e.name.endsWith('.pyc')) continue;
    out.push(...expand(join(abs, e.name)));
  }
  return out.sort();
}

async function digestPaths(paths: readonly string[], root: string, hasher: FileHasher, missing: (p: string) => Failure): Promise<Result<Record<string, FileSha256>, Failure>> {
  const names: string[] = [];
  const files: string[] = [];
  for (const declared of paths) {
    const abs = isAbsolute(declared) ? declared : join(root, declared);
    let found: string[];
    try {
      found = expand(abs);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return err(missing(declared));
      throw e;
    }
    for (const f of found) {
      files.push(f);
      names.push(f === abs ? declared : `${declared.replace(/\/+$/, '')}/${relative(abs, f).split('\\').join('/')}`);
    }
  }
  const digests = await hasher.hashAll(files);
  const out: Record<string, FileSha256> = {};
  const order = names.map((n, i) => [n, i] as const).sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  for (const [n, i] of order) out[n] = digests[i]!.sha256;
  return ok(out);
}

export interface KeyInputs {
  def: StageDef<unknown>;
  params: { [key: string]: JsonValue };
  root: string;
  /** The profile's name: enters the key only for a stage that names it in its outputs (StageDef.namesProfile). */
  profile: string;
  /** Where `facts` may cache probes (`<workdir>/.ternforge/cache`). */
  cacheDir: string;
  hasher: FileHasher;
  upstream: Record<string, OutputDigest>;
  /** Known tool versions (node always; python/torch from the venv's ternforge-env.json). */
  toolVersions: Partial<Record<Tool, string>>;
  /** The stage's standing pin-lock entries, when it requests any (undefined: the field stays out of the key). */
  pins?: Record<string, LockedSource>;
}

export async function computeKeyData(k: KeyInputs): Promise<Result<StageKeyData, Failure>> {
  const stage = k.def.name;
  const code = await digestPaths(k.def.code, k.root, k.hasher, (path) => ({ reason: 'missing-code', stage, path }));
  if (!code.ok) return code;
  const inputs = await digestPaths(k.def.inputs?.(k.params, k.root) ?? [], k.root, k.hasher, (path) => ({ reason: 'missing-input', stage, path }));
  if (!inputs.ok) return inputs;
  const tools: Partial<Record<Tool, string>> = {};
  for (const t of [...(k.def.tools ?? [])].sort()) tools[t] = k.toolVersions[t] ?? 'absent';
  const facts = k.def.facts === undefined ? {} : await k.def.facts(k.params, k.root, k.cacheDir);
  if (k.def.namesProfile === true) facts.profile = k.profile;
  const params = k.def.keyParams?.(k.params) ?? k.params;
  const data: StageKeyData = { format: ENGINE_FORMAT, stage, code: code.value, params, inputs: inputs.value, upstream: { ...k.upstream }, tools, facts };
  if (k.pins !== undefined) data.pins = k.pins;
  return ok(data);
}

/** Why a stage is stale: one typed reason per changed field. Text and --json share it. */
export type StaleReason =
  /** No lock entry: the stage never ran in this profile. */
  | { kind: 'never-run' }
  /** `--force` named it. */
  | { kind: 'forced' }
  /** The engine format changed. */
  | { kind: 'engine'; from: number; to: number }
  /** A parameter changed: dotted path from the stage name (`quantize.steps`); absent sides omitted. */
  | { kind: 'param'; path: string; from?: JsonValue; to?: JsonValue }
  /** A code file of the stage changed. */
  | { kind: 'code'; file: string; change: Change }
  /** A declared input file changed. */
  | { kind: 'input'; path: string; change: Change }
  /** An upstream stage's outputs changed (`changed`), or it is itself stale and runs first (`stale`). */
  | { kind: 'upstream'; stage: string; change: 'changed' | 'stale' | 'new' | 'removed' }
  /** A declared tool's version changed. */
  | { kind: 'tool'; name: string; from?: string; to?: string }
  /** A declared environment fact changed. */
  | { kind: 'fact'; name: string; from?: string; to?: string }
  /** Key unchanged, but the outputs the lock names are gone or modified. */
  | { kind: 'output-missing' }
  /**
   * A pinned source: locked at another commit or with other files (`changed`), newly or no longer
   * requested, or `unresolved`: no standing entry in profiles/<profile>.lock.json yet (the run resolves it).
   */
  | { kind: 'pin'; source: string; change: 'changed' | 'new' | 'removed' | 'unresolved'; from?: string; to?: string };

export type Change = 'modified' | 'new' | 'deleted';

function diffMaps<K extends 'code' | 'input'>(kind: K, from: Record<string, string>, to: Record<string, string>): StaleReason[] {
  const out: StaleReason[] = [];
  for (const name of [...new Set([...Object.keys(from), ...Object.keys(to)])].sort()) {
    const a = from[name];
    const b = to[name];
    if (a === b) continue;
    const change: Change = a === undefined ? 'new' : b === undefined ? 'deleted' : 'modified';
    out.push(kind === 'code' ? { kind: 'code', file: name, change } : { kind: 'input', path: name, change });
  }
  return out;
}

function isObject(v: unknown): v is Record<string, JsonValue> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/** Field-by-field parameter diff (objects recursed; arrays and scalars compared whole). */
export function diffParams(path: string, from: JsonValue | undefined, to: JsonValue | undefined): StaleReason[] {
  if (isObject(from) && isObject(to)) {
    const keys = [...new Set([...Object.keys(from), ...Object.keys(to)])].sort();
    return keys.flatMap((k) => diffParams(`${path}.${k}`, from[k], to[k]));
  }
  if (canonicalJson(from) === canonicalJson(to)) return [];
  const r: { kind: 'param'; path: string; from?: JsonValue; to?: JsonValue } = { kind: 'param', path };
  if (from !== undefined) r.from = from;
  if (to !== undefined) r.to = to;
  return [r];
}

function diffStrings(kind: 'tool' | 'fact', from: Record<string, string>, to: Record<string, string>): StaleReason[] {
  const out: StaleReason[] = [];
  for (const name of [...new Set([...Object.keys(from), ...Object.keys(to)])].sort()) {
    if (from[name] === to[name]) continue;
    const r: { kind: 'tool' | 'fact'; name: string; from?: string; to?: string } = { kind, name };
    if (from[name] !== undefined) r.from = from[name];
    if (to[name] !== undefined) r.to = to[name];
    out.push(r as StaleReason);
  }
  return out;
}

/** The differences between the lock's key record and the current one. */
export function diffKeys(locked: StageKeyDataWire, current: StageKeyData): StaleReason[] {
  const out: StaleReason[] = [];
  if (locked.format !== current.format) out.push({ kind: 'engine', from: locked.format, to: current.format });
  out.push(...diffParams(current.stage, locked.params as JsonValue, current.params));
  out.push(...diffMaps('code', locked.code, current.code));
  out.push(...diffMaps('input', locked.inputs, current.inputs));
  for (const s of [...new Set([...Object.keys(locked.upstream), ...Object.keys(current.upstream)])].sort()) {
    const a = locked.upstream[s];
    const b = current.upstream[s];
    if (a !== b) out.push({ kind: 'upstream', stage: s, change: a === undefined ? 'new' : b === undefined ? 'removed' : 'changed' });
  }
  out.push(...diffStrings('tool', locked.tools, current.tools as Record<string, string>));
  out.push(...diffStrings('fact', locked.facts, current.facts));
  const a = locked.pins ?? {};
  const b = current.pins ?? {};
  for (const source of [...new Set([...Object.keys(a), ...Object.keys(b)])].sort()) {
    const x = a[source];
    const y = b[source];
    if (canonicalJson(x) === canonicalJson(y)) continue;
    if (x === undefined) out.push({ kind: 'pin', source, change: 'new', to: y!.commit });
    else if (y === undefined) out.push({ kind: 'pin', source, change: 'removed', from: x.commit });
    else out.push({ kind: 'pin', source, change: 'changed', from: x.commit, to: y.commit });
  }
  return out;
}

/** One line per reason, as `status --why` and `--dry-run` print it. */
export function formatReason(r: StaleReason): string {
  const show = (v: JsonValue | undefined): string => (v === undefined ? '(absent)' : JSON.stringify(v));
  switch (r.kind) {
    case 'never-run':
      return 'never run';
    case 'forced':
      return 'forced (--force)';
    case 'engine':
      return `engine format ${r.from} -> ${r.to}`;
    case 'param':
      return `param ${r.path}: ${show(r.from)} -> ${show(r.to)}`;
    case 'code':
      return `code ${r.file}: ${r.change}`;
    case 'input':
      return `input ${r.path}: ${r.change}`;
    case 'upstream':
      return r.change === 'stale' ? `upstream ${r.stage}: stale, runs first` : `upstream ${r.stage}: outputs ${r.change}`;
    case 'tool':
      return `tool ${r.name}: ${r.from ?? '(absent)'} -> ${r.to ?? '(absent)'}`;
    case 'fact':
      return `fact ${r.name}: ${r.from ?? '(absent)'} -> ${r.to ?? '(absent)'}`;
    case 'output-missing':
      return 'outputs missing or modified';
    case 'pin':
      return r.change === 'unresolved' ? `pin ${r.source}: not in the lock yet (resolved when the stage runs, or by \`lock\`)`
        : r.change === 'changed' ? `pin ${r.source}: ${r.from} -> ${r.to}${r.from === r.to ? ' (files changed)' : ''}`
        : `pin ${r.source}: ${r.change}${r.to !== undefined ? ` at ${r.to}` : r.from !== undefined ? ` (was ${r.from})` : ''}`;
  }
}
