/**
 * The independent audit of a submission directory (quantization_manifest.json + weights/) against its source
 * checkpoint. It trusts nothing the writer says: the manifest is checked against its schema, each shard's
 * size and sha256 are recomputed, every packed code byte is scanned for the invalid code 3, every key's dtype
 * and shape are read from the stored headers, exemption is decided by name (never by the manifest's flag),
 * and the gates count elements from the stored headers. It does not import lib/pack.
 *
 * What is served must be what is audited, so it also checks:
 * - each shard name resolves inside `weights/` (no absolute path, no `..`, no symlink leading out):
 *   `shard-path-outside-weights`, and the shard is not opened;
 * - each entry's keys are its own: `<name>.codes` and `<name>.scale` for `packed_2bit`, `<name>` for
 *   `float` (as pack writes them), so two same-shaped tensors cannot swap their bytes: `key-not-own`;
 * - values: every scale finite and in (0, SCALE_MAX] (`scale-not-finite`, `scale-not-positive`,
 *   `scale-out-of-range`); every float tensor finite (`float-not-finite`).
 */
import { readFile, readdir, realpath } from 'node:fs/promises';
import { isAbsolute, join, posix, sep } from 'node:path';
import { engineSchemaSet } from '../../engine/json-io.ts';
import type { AuditReport, GateName, ShardRow, TensorRow, Violation, ViolationReason } from '../../schemas/generated/audit-report.ts';
import type { ManifestTensor, QuantizationManifest } from '../../schemas/generated/manifest.ts';
import { openSafetensors, type SafetensorsFile } from '../safetensors/reader.ts';
import { contract } from '../contract.ts';
import { computeGates, gateThresholds, type CountedTensor } from './gates.ts';
import { ShardScanner, type CodeRange } from './scan.ts';
import { isEmbeddingOrHead, isExemptName, textModelFilter, type SourceDescription } from './source.ts';

/** The manifest's schema, relative to schemas/ (the one schema set, engine/json-io.ts). */
export const MANIFEST_SCHEMA = 'manifest.schema.json';
/**
 * The largest scale accepted (schemas/contract.json packing.scale_max: 65504, the largest finite float16). A
 * dequantized weight is +-scale, and a source weight beyond float16's range is not one a bf16 text model
 * holds; larger scales are corrupt.
 */
export function scaleMax(): number {
  return contract().packing.scale_max;
}
export const GATES: readonly GateName[] = ['ternary-fraction', 'stored-parameters', 'weight-audit'];

/** audit.json's shape: schemas/audit-report.schema.json and its generated types (Violation.reason is the ViolationReason union). */
export type { AuditReport, GateName, ShardRow, TensorRow, Violation, ViolationReason };

export interface AuditOptions {
  /** The source checkpoint's own tensor list; null skips the coverage check (the gates then use the manifest's list). */
  source: SourceDescription | null;
}

/** Audits `dir`. Never throws for bad submissions: every problem is a violation in the report. */
export async function auditSubmission(dir: string, options: AuditOptions): Promise<AuditReport> {
  const violations: Violation[] = [];
  const v = (x: Violation): void => {
    violations.push(x);
  };
  const manifestPath = join(dir, contract().submission.manifest);
  const manifest = await readManifest(manifestPath, v);
  const shardRows: ShardRow[] = [];
  const rows: TensorRow[] = [];
  const open = new Map<string, SafetensorsFile>();
  const scanner = new ShardScanner();
  try {
    if (manifest) {
      await checkShards(dir, manifest, open, shardRows, v, scanner);
      checkTensors(manifest, open, rows, v, options.source);
      await checkValues(manifest, open, v);
      if (options.source) checkSource(manifest, options.source, rows, v);
    }
  } finally {
    await scanner.close();
    await Promise.all([...open.values()].map((f) => f.close()));
  }
  return buildReport(manifest, options.source, rows, shardRows, violations);
}

async function readManifest(path: string, v: (x: Violation) => void): Promise<QuantizationManifest | null> {
  let json: unknown;
  try {
    json = JSON.parse(await readFile(path, 'utf8'));
  } catch (e) {
    v({ gate: 'weight-audit', reason: 'manifest-unreadable', detail: `${path}: ${(e as Error).message}` });
    return null;
  }
  const errors = engineSchemaSet().validate(MANIFEST_SCHEMA, json);
  if (errors.length > 0) {
    for (const e of errors) v({ gate: 'weight-audit', reason: 'manifest-invalid', detail: e });
    // Name a shard path outside weights/ for what it is, beside the schema's pattern message.
    const shards = (json as { shards?: unknown }).shards;
    for (const s of Array.isArray(shards) ? shards : []) {
      const file = (s as { file?: unknown } | null)?.file;
      const problem = typeof file === 'string' ? shardNameProblem(file) : null;
      if (problem !== null) v({ gate: 'weight-audit', reason: 'shard-path-outside-weights', shard: file as string, detail: problem });
    }
    return null;
  }
  return json as QuantizationManifest;
}

/** Shard files: listed once, present, strict headers, size and sha256 recomputed, code bytes scanned. */
async function checkShards(dir: string, manifest: QuantizationManifest, open: Map<string, SafetensorsFile>, out: ShardRow[], v: (x: Violation) => void, scanner: ShardScanner): Promise<void> {
  const listed = new Set<string>();
  for (const shard of manifest.shards) {
    if (listed.has(shard.file)) v({ gate: 'weight-audit', reason: 'duplicate-shard', shard: shard.file });
    listed.add(shard.file);
  }
  const onDisk = await readdir(join(dir, 'weights')).catch(() => [] as string[]);
  for (const name of onDisk.sort()) {
    if (name.endsWith('.safetensors') && !listed.has(`weights/${name}`)) v({ gate: 'weight-audit', reason: 'unlisted-shard', shard: `weights/${name}`, detail: 'a weights file the manifest does not list' });
  }
  // Which byte ranges of each shard hold packed codes, from the stored headers (opened first).
  for (const shard of manifest.shards) {
    if (open.has(shard.file)) continue;
    const outside = await shardPathProblem(dir, shard.file);
    if (outside !== null) {
      v({ gate: 'weight-audit', reason: 'shard-path-outside-weights', shard: shard.file, detail: outside });
      out.push({ file: shard.file, size: shard.size, sha256: null, size_ok: false, sha256_ok: false, code_bytes_scanned: 0 });
      continue;
    }
    const f = await openSafetensors(join(dir, shard.file));
    if (!f.ok) {
      const reason = f.error.reason === 'io-error' ? 'shard-missing' : 'shard-invalid';
      v({ gate: 'weight-audit', reason, shard: shard.file, detail: f.error.message });
      out.push({ file: shard.file, size: shard.size, sha256: null, size_ok: false, sha256_ok: false, code_bytes_scanned: 0 });
      continue;
    }
    open.set(shard.file, f.value);
  }
  const rangesByShard = new Map<string, CodeRange[]>();
  for (const [name, t] of Object.entries(manifest.tensors)) {
    if (t.encoding !== 'packed_2bit' || t.codes_key === undefined) continue;
    const f = open.get(t.shard);
    const info = f?.get(t.codes_key);
    if (!f || !info || info.dtype !== 'U8') continue;
    const [begin, end] = f.absoluteRange(info);
    const list = rangesByShard.get(t.shard) ?? [];
    if (!list.some((r) => r.begin === begin)) list.push({ tensor: name, begin, end });
    rangesByShard.set(t.shard, list);
  }
  // Every shard at once: the scanner spreads them over its threads; results are reported in manifest order.
  const seen = new Set(out.map((r) => r.file));
  const todo: Array<QuantizationManifest['shards'][number]> = [];
  for (const shard of manifest.shards) {
    if (!open.has(shard.file) || seen.has(shard.file)) continue;
    seen.add(shard.file);
    todo.push(shard);
  }
  const scans = await Promise.all(todo.map((shard) => scanner.scan(open.get(shard.file)!.path, rangesByShard.get(shard.file) ?? [])));
  for (const [i, shard] of todo.entries()) {
    const scan = scans[i]!;
    const row: ShardRow = { file: shard.file, size: scan.size, sha256: scan.sha256, size_ok: scan.size === shard.size, sha256_ok: scan.sha256 === shard.sha256, code_bytes_scanned: scan.codeBytes };
    out.push(row);
    if (!row.size_ok) v({ gate: 'weight-audit', reason: 'shard-size-mismatch', shard: shard.file, expected: shard.size, actual: scan.size });
    if (!row.sha256_ok) v({ gate: 'weight-audit', reason: 'shard-sha256-mismatch', shard: shard.file, expected: shard.sha256, actual: scan.sha256 });
    for (const bad of scan.invalid) {
      v({ gate: 'weight-audit', reason: 'invalid-code', tensor: bad.tensor, shard: shard.file, detail: `codes byte ${bad.byte} = 0x${bad.value.toString(16).padStart(2, '0')} holds the invalid code 3` });
    }
  }
}

/** Why the name alone is not a path inside `weights/` (see shardPathProblem), or null. */
function shardNameProblem(file: string): string | null {
  if (isAbsolute(file) || file.startsWith('/')) return 'an absolute path; shards are named relative to the submission, inside weights/';
  if (file.includes('\\') || file.includes('\0')) return 'a backslash or NUL in the name';
  if (file.split('/').some((part) => part === '..' || part === '.' || part === '')) return 'a "..", "." or empty path segment; shards are named weights/<file>';
  if (posix.normalize(file) !== file || !file.startsWith('weights/')) return 'not inside weights/';
  return null;
}

/**
 * Why `file` (a manifest shard name) does not name a file inside `<dir>/weights/`, or null when it does: the
 * name must be a relative, normalized POSIX path under `weights/`, and its real path (symlinks resolved)
 * must stay inside the real `weights/`.
 */
export async function shardPathProblem(dir: string, file: string): Promise<string | null> {
  const lexical = shardNameProblem(file);
  if (lexical !== null) return lexical;
  let weights: string;
  let real: string;
  try {
    weights = await realpath(join(dir, 'weights'));
    real = await realpath(join(dir, file));
  } catch {
    return null; // missing: reported when opened
  }
  if (!real.startsWith(weights + sep)) return `resolves to ${real}, outside weights/`;
  return null;
}

/** Each manifest entry against the stored headers; fills the per-tensor counts (from stored bytes). */
function checkTensors(manifest: QuantizationManifest, open: Map<string, SafetensorsFile>, rows: TensorRow[], v: (x: Violation) => void, source: SourceDescription | null): void {
  const shardFiles = new Set(manifest.shards.map((s) => s.file));
  const usedKeys = new Map<string, string>(); // "shard\0key" -> tensor
  const sourceNames = source ? new Set(source.tensors.map((t) => t.name)) : null;
  const isText = textModelFilter(source ? source.tensors.map((t) => t.name) : Object.keys(manifest.tensors));
  for (const name of Object.keys(manifest.tensors).sort()) {
    const t = manifest.tensors[name]!;
    const row: TensorRow = { name, encoding: t.encoding, shape: t.shape, audited: false, in_source: sourceNames?.has(name) ?? true, original: 0, codes: 0, scales: 0, floats: 0 };
    rows.push(row);
    if (t.exempt === true && !isExemptName(name)) v({ gate: 'weight-audit', reason: 'false-exemption', tensor: name, detail: `marked exempt but not under ${contract().tensors.exempt_prefixes.join(' or ')}` });
    if (!shardFiles.has(t.shard)) {
      v({ gate: 'weight-audit', reason: 'unknown-shard', tensor: name, shard: t.shard });
      continue;
    }
    const f = open.get(t.shard);
    const useKey = (key: string | undefined, role: string): ReturnType<SafetensorsFile['get']> => {
      if (key === undefined) {
        v({ gate: 'weight-audit', reason: 'missing-key', tensor: name, shard: t.shard, detail: `${t.encoding} needs ${role}` });
        return undefined;
      }
      const prior = usedKeys.get(`${t.shard}\0${key}`);
      if (prior !== undefined) v({ gate: 'weight-audit', reason: 'key-shared', tensor: name, shard: t.shard, detail: `${key} is also ${prior}'s` });
      usedKeys.set(`${t.shard}\0${key}`, name);
      if (!f) return undefined; // the shard itself failed; already reported
      const info = f.get(key);
      if (!info) v({ gate: 'weight-audit', reason: 'key-not-in-shard', tensor: name, shard: t.shard, expected: key, actual: 'absent' });
      return info;
    };
    const own = t.encoding === 'packed_2bit' ? { codes_key: `${name}.codes`, scale_key: `${name}.scale` } : { data_key: name };
    for (const [field, expected] of Object.entries(own)) {
      const actual = (t as unknown as Record<string, unknown>)[field];
      if (actual !== undefined && actual !== expected) v({ gate: 'weight-audit', reason: 'key-not-own', tensor: name, shard: t.shard, expected, actual: String(actual), detail: `${field} must name this entry's own tensor` });
    }
    if (t.encoding === 'packed_2bit') {
      const codes = useKey(t.codes_key, 'codes_key');
      const scale = useKey(t.scale_key, 'scale_key');
      const [out, cols] = t.shape.length === 2 ? (t.shape as [number, number]) : [NaN, NaN];
      if (t.shape.length !== 2) v({ gate: 'weight-audit', reason: 'packed-not-2d', tensor: name, expected: '[out, in]', actual: JSON.stringify(t.shape) });
      const g = t.group_size;
      const gOk = g !== undefined && g % 4 === 0 && g > 0 && cols % g === 0;
      if (!gOk) v({ gate: 'weight-audit', reason: 'invalid-group-size', tensor: name, expected: `a multiple of 4 dividing ${cols}`, actual: g ?? 'absent' });
      if (codes) {
        const expected = `U8 ${JSON.stringify([out, cols / 4])}`;
        const actual = `${codes.dtype} ${JSON.stringify(codes.shape)}`;
        if (expected !== actual) v({ gate: 'weight-audit', reason: 'codes-shape-mismatch', tensor: name, shard: t.shard, expected, actual });
        if (codes.dtype === 'U8' || codes.dtype === 'I8') row.codes = 4 * (codes.end - codes.begin);
        else row.floats += numel(codes.shape);
      }
      if (scale) {
        const expected = gOk ? `F32 ${JSON.stringify([out, cols / g!])}` : `F32 [${out}, ${cols}/g]`;
        const actual = `${scale.dtype} ${JSON.stringify(scale.shape)}`;
        if (expected !== actual) v({ gate: 'weight-audit', reason: 'scale-shape-mismatch', tensor: name, shard: t.shard, expected, actual });
        row.scales = numel(scale.shape);
      }
    } else {
      const data = useKey(t.data_key, 'data_key');
      if (data) {
        const expected = `${t.dtype} ${JSON.stringify(t.shape)}`;
        const actual = `${data.dtype} ${JSON.stringify(data.shape)}`;
        if (expected !== actual) v({ gate: 'weight-audit', reason: 'float-mismatch', tensor: name, shard: t.shard, expected, actual });
        row.floats = numel(data.shape);
      }
    }
    // In the gates' set: text model (decided by name), minus embedding and head. A stored tensor the source
    // lacks counts wholly as float.
    row.audited = !isExemptName(name) && !isEmbeddingOrHead(name) && (isText(name) || !row.in_source);
    if (!row.in_source) {
      row.floats += row.codes + row.scales;
      row.codes = 0;
      row.scales = 0;
    }
    row.original = row.in_source ? numel(t.shape) : 0;
  }
  // Stored tensors no manifest entry references: bytes the server would not load and the gates would not see.
  for (const [file, f] of [...open].sort(([a], [b]) => (a < b ? -1 : 1))) {
    for (const key of f.names()) {
      if (!usedKeys.has(`${file}\0${key}`)) v({ gate: 'weight-audit', reason: 'unreferenced-stored-tensor', shard: file, tensor: key });
    }
  }
}

const FLOAT_DTYPES = new Set(['F16', 'BF16', 'F32', 'F64']);

/** The first element of a float tensor's bytes that is not finite, as [index, value], or null. */
function firstNonFinite(dtype: string, bytes: Uint8Array): [number, number] | null {
  const b = bytes.byteOffset % 8 === 0 ? bytes : bytes.slice();
  if (dtype === 'BF16' || dtype === 'F16') {
    const u = new Uint16Array(b.buffer, b.byteOffset, b.byteLength >>> 1);
    const mask = dtype === 'BF16' ? 0x7f80 : 0x7c00;
    for (let i = 0; i < u.length; i++) {
      if ((u[i]! & mask) === mask) {
        const frac = dtype === 'BF16' ? u[i]! & 0x7f : u[i]! & 0x3ff;
        return [i, frac !== 0 ? NaN : u[i]! & 0x8000 ? -Infinity : Infinity];
      }
    }
    return null;
  }
  const f = dtype === 'F32' ? new Float32Array(b.buffer, b.byteOffset, b.byteLength >>> 2) : new Float64Array(b.buffer, b.byteOffset, b.byteLength >>> 3);
  for (let i = 0; i < f.length; i++) if (!Number.isFinite(f[i]!)) return [i, f[i]!];
  return null;
}

/** Scales finite and in (0, SCALE_MAX]; float tensors finite. One violation per tensor (its first bad element). */
async function checkValues(manifest: QuantizationManifest, open: Map<string, SafetensorsFile>, v: (x: Violation) => void): Promise<void> {
  const SCALE_MAX = scaleMax();
  for (const name of Object.keys(manifest.tensors).sort()) {
    const t = manifest.tensors[name]!;
    const f = open.get(t.shard);
    if (!f) continue;
    const key = t.encoding === 'packed_2bit' ? t.scale_key : t.data_key;
    const info = key === undefined ? undefined : f.get(key);
    if (!info || !FLOAT_DTYPES.has(info.dtype)) continue;
    const size = info.dtype === 'F64' ? 8 : info.dtype === 'F32' ? 4 : 2;
    let base = 0;
    for await (const chunk of f.streamTensor(key!)) {
      if (t.encoding === 'packed_2bit' && info.dtype === 'F32') {
        const b = chunk.byteOffset % 4 === 0 ? chunk : Buffer.from(chunk);
        const s = new Float32Array(b.buffer, b.byteOffset, b.byteLength >>> 2);
        let bad: [ViolationReason, number, number] | null = null;
        for (let i = 0; i < s.length; i++) {
          const x = s[i]!;
          if (x > 0 && x <= SCALE_MAX) continue;
          bad = [Number.isNaN(x) || !Number.isFinite(x) ? 'scale-not-finite' : x <= 0 ? 'scale-not-positive' : 'scale-out-of-range', base + i, x];
          break;
        }
        if (bad !== null) {
          v({ gate: 'weight-audit', reason: bad[0], tensor: name, shard: t.shard, expected: `finite, > 0, <= ${SCALE_MAX}`, actual: String(bad[2]), detail: `${key} element ${bad[1]}` });
          break;
        }
      } else {
        const bad = firstNonFinite(info.dtype, chunk);
        if (bad !== null) {
          v({ gate: 'weight-audit', reason: t.encoding === 'packed_2bit' ? 'scale-not-finite' : 'float-not-finite', tensor: name, shard: t.shard, expected: 'finite', actual: String(bad[1]), detail: `${key} element ${base + bad[0]}` });
          break;
        }
      }
      base += chunk.byteLength / size;
    }
  }
}

/** Every text-model tensor of the source is in the manifest (or tied to one that is), with its shape and dtype. */
function checkSource(manifest: QuantizationManifest, source: SourceDescription, rows: TensorRow[], v: (x: Violation) => void): void {
  const tiedTo = new Map<string, string>();
  for (const [name, t] of Object.entries(manifest.tensors)) for (const other of t.tied_to ?? []) tiedTo.set(other, name);
  const isText = textModelFilter(source.tensors.map((t) => t.name));
  const byName = new Map(rows.map((r) => [r.name, r]));
  for (const s of [...source.tensors].sort((a, b) => (a.name < b.name ? -1 : 1))) {
    if (!isText(s.name)) continue;
    const entry: ManifestTensor | undefined = manifest.tensors[s.name] ?? manifest.tensors[tiedTo.get(s.name) ?? ''];
    if (!entry) {
      v({ gate: 'weight-audit', reason: 'tensor-not-in-manifest', tensor: s.name, detail: `source ${s.dtype} ${JSON.stringify(s.shape)}` });
      // Still in the gates' original count: a missing tensor must not shrink the audited set.
      if (!isEmbeddingOrHead(s.name)) rows.push({ name: s.name, encoding: 'missing', shape: s.shape, audited: true, in_source: true, original: numel(s.shape), codes: 0, scales: 0, floats: 0 });
      continue;
    }
    if (JSON.stringify(entry.shape) !== JSON.stringify(s.shape)) v({ gate: 'weight-audit', reason: 'source-shape-mismatch', tensor: s.name, expected: JSON.stringify(s.shape), actual: JSON.stringify(entry.shape) });
    if (entry.dtype !== s.dtype) v({ gate: 'weight-audit', reason: 'source-dtype-mismatch', tensor: s.name, expected: s.dtype, actual: entry.dtype });
    const row = byName.get(s.name);
    if (row) row.original = numel(s.shape);
  }
  if (source.tieWordEmbeddings === true && !source.tensors.some((t) => t.name === 'lm_head.weight') && ![...tiedTo.keys()].includes('lm_head.weight')) {
    v({ gate: 'weight-audit', reason: 'tied-head-unrecorded', tensor: 'lm_head.weight', detail: 'the source ties the head to the embedding; the manifest records no tied_to' });
  }
}

function buildReport(manifest: QuantizationManifest | null, source: SourceDescription | null, rows: TensorRow[], shards: ShardRow[], violations: Violation[]): AuditReport {
  const { ternaryFractionMin: TERNARY_FRACTION_MIN, storedRatioMax: STORED_RATIO_MAX } = gateThresholds();
  const audited: CountedTensor[] = rows.filter((r) => r.audited);
  const figures = computeGates(audited);
  const valid = manifest !== null;
  const gate1 = valid && figures.ternary_fraction_pass;
  const gate2 = valid && figures.stored_ratio_pass;
  if (valid && !gate1) violations.push({ gate: 'ternary-fraction', reason: 'ternary-fraction-too-low', expected: `> ${TERNARY_FRACTION_MIN}`, actual: figures.ternary_fraction });
  if (valid && !gate2) violations.push({ gate: 'stored-parameters', reason: 'stored-ratio-too-high', expected: `<= ${STORED_RATIO_MAX}`, actual: figures.stored_ratio });
  const gate3 = !violations.some((x) => x.gate === 'weight-audit');
  const failed = GATES.filter((g) => !{ 'ternary-fraction': gate1, 'stored-parameters': gate2, 'weight-audit': gate3 }[g]);
  const isText = source ? textModelFilter(source.tensors.map((t) => t.name)) : null;
  return {
    format: 'ternforge-audit/1',
    pass: failed.length === 0,
    failed_gates: failed,
    thresholds: { ternary_fraction_min: TERNARY_FRACTION_MIN, stored_ratio_max: STORED_RATIO_MAX },
    source_coverage: source ? 'checked' : 'skipped',
    source: source?.origin ?? null,
    gates: {
      'ternary-fraction': { pass: gate1, value: figures.ternary_fraction, threshold: TERNARY_FRACTION_MIN, margin: figures.ternary_fraction_margin },
      'stored-parameters': { pass: gate2, stored: figures.stored, original: figures.original, ratio: figures.stored_ratio, threshold: STORED_RATIO_MAX, margin: figures.stored_ratio_margin },
      'weight-audit': { pass: gate3, violations: violations.filter((x) => x.gate === 'weight-audit').length },
    },
    counts: {
      ...figures,
      manifest_tensors: manifest ? Object.keys(manifest.tensors).length : 0,
      exempt_tensors: rows.filter((r) => isExemptName(r.name)).length,
      excluded: rows.filter((r) => !isExemptName(r.name) && isEmbeddingOrHead(r.name)).map((r) => r.name),
      source_text_tensors: source && isText ? source.tensors.filter((t) => isText(t.name)).length : null,
    },
    shards,
    violations,
    tensors: rows.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)),
  };
}

function numel(shape: readonly number[]): number {
  return shape.reduce((a, b) => a * b, 1);
}

/** The line that says why no gate could be checked, or null when the manifest was read. */
export function manifestUnreadable(report: AuditReport): string | null {
  const v = report.violations.find((x) => x.reason === 'manifest-unreadable');
  return v === undefined ? null : `the manifest cannot be read, so no gate can be checked: ${v.detail}`;
}

/** One line per failed gate, naming its violations (for stage failures and the CLI). */
export function describeFailures(report: AuditReport): string[] {
  // Without the manifest nothing was audited: one line with the reason, not every gate failing with none.
  const unreadable = manifestUnreadable(report);
  if (unreadable !== null) return [unreadable];
  return report.failed_gates.map((g) => {
    const list = report.violations.filter((x) => x.gate === g);
    const shown = list.slice(0, 5).map((x) => [x.reason, x.tensor, x.shard, x.expected !== undefined ? `expected ${x.expected}` : undefined, x.actual !== undefined ? `actual ${x.actual}` : undefined, x.detail !== undefined ? `(${x.detail})` : undefined].filter((p) => p !== undefined).join(' '));
    return `gate ${g} failed: ${shown.join('; ')}${list.length > 5 ? `; and ${list.length - 5} more` : ''}`;
  });
}
