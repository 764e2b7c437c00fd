/**
 * pack: the quantize stage's interchange (index.json + safetensors, DESIGN.md section 2) -> `weights/`
 * shards of 2-bit codes, F32 scales and float tensors, plus `quantization_manifest.json`.
 *
 * Everything is validated before the first byte is written, except the ternary values themselves, which are
 * checked while streaming; a bad value removes what was written. One chunk of one tensor is in memory at a
 * time. Same input, same bytes: tensors are visited in name order and every file's layout is fixed.
 */
import { readFile, mkdir, rm, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { engineSchemaSet } from '../../engine/json-io.ts';
import { err, ok, type Result } from '../../engine/result.ts';
import type { InterchangeIndex, InterchangeTensor } from '../../schemas/generated/interchange-index.ts';
import type { ManifestTensor, QuantizationManifest } from '../../schemas/generated/manifest.ts';
import { openFiles, type Checkpoint } from '../safetensors/checkpoint.ts';
import { byteSize, isDtype } from '../safetensors/dtypes.ts';
import { SafetensorsError } from '../safetensors/errors.ts';
import { writeSafetensors, type WriteEntry } from '../safetensors/writer.ts';
import { CODES_PER_BYTE, checkGroupSize, packInto } from './layout.ts';
import type { PackFailure } from '../failures.ts';
import { contract, isExemptName as isExempt } from '../contract.ts';

export const DEFAULT_SHARD_BYTES = 2 * 1024 ** 3;
/**
 * The packing convention as the manifest spells it: schemas/contract.json `packing.manifest`
 * (schemas/manifest.schema.json pins the same strings; test/contract.test.ts holds them equal).
 */
export function manifestPacking(): QuantizationManifest['packing'] {
  return { ...contract().packing.manifest } as QuantizationManifest['packing'];
}

export interface PackOptions {
  /** Data bytes per shard before a new one starts (default 2 GiB). */
  shardBytes?: number;
  /** Whether embedding and head are tied; default: an embedding and no `lm_head.weight` in the interchange. */
  tieWordEmbeddings?: boolean;
  /** Streaming chunk size (a multiple of 4; default 8 MiB). */
  chunkBytes?: number;
  log?: (line: string) => void;
}

export interface PackSummary {
  tensors: number;
  ternary: number;
  float: number;
  exempt: number;
  tied: boolean;
  shards: QuantizationManifest['shards'];
  /** Bytes of all shards. */
  bytes: number;
  /** Elements: ternary weights (codes), scales, float tensors. */
  codes: number;
  scales: number;
  floats: number;
}

/** One tensor of the plan: what goes into which shard. */
interface Planned {
  name: string;
  entry: InterchangeTensor;
  /** Bytes it adds to its shard. */
  bytes: number;
  ternary: { rows: number; cols: number; groupSize: number; scaleShape: [number, number] } | null;
  shard: number;
}

/** Thrown inside a streaming source to abort the write; caught and returned as data. */
class PackAbort extends Error {
  constructor(readonly failure: PackFailure) {
    super(failure.reason);
  }
}

export function shardName(k: number, n: number): string {
  return `model-${String(k).padStart(5, '0')}-of-${String(n).padStart(5, '0')}.safetensors`;
}

/** Reads and validates index.json against its schema. */
export async function readInterchangeIndex(dir: string): Promise<Result<InterchangeIndex, PackFailure>> {
  const path = join(dir, 'index.json');
  let json: unknown;
  try {
    json = JSON.parse(await readFile(path, 'utf8'));
  } catch (e) {
    return err({ reason: 'invalid-interchange-index', path, errors: [(e as Error).message] });
  }
  const errors = engineSchemaSet().validate('interchange-index.schema.json', json);
  if (errors.length > 0) return err({ reason: 'invalid-interchange-index', path, errors });
  return ok(json as InterchangeIndex);
}

/** Packs the interchange in `interchangeDir` into `outDir` (weights/ and the manifest). */
export async function packInterchange(interchangeDir: string, outDir: string, options: PackOptions = {}): Promise<Result<PackSummary, PackFailure>> {
  const log = options.log ?? (() => undefined);
  const index = await readInterchangeIndex(interchangeDir);
  if (!index.ok) return index;
  const opened = await openFiles(interchangeDir, index.value.files, null);
  if (!opened.ok) return err({ reason: 'invalid-safetensors', error: opened.error.toJSON() });
  const ckpt = opened.value;
  const { weights_dir: WEIGHTS_DIR, manifest: MANIFEST_FILE } = contract().submission;
  const weightsDir = join(outDir, WEIGHTS_DIR);
  const written: string[] = [];
  try {
    const plan = planTensors(index.value, ckpt, options);
    if (!plan.ok) return plan;
    const { planned, tied, shardCount } = plan.value;
    await mkdir(weightsDir, { recursive: true });
    const chunkBytes = options.chunkBytes ?? 8 << 20;
    if (chunkBytes % CODES_PER_BYTE !== 0) throw new RangeError(`chunkBytes must be a multiple of 4, got ${chunkBytes}`);

    const shards: QuantizationManifest['shards'][number][] = [];
    for (let k = 0; k < shardCount; k++) {
      const file = shardName(k + 1, shardCount);
      const entries: WriteEntry[] = [];
      for (const p of planned.filter((q) => q.shard === k)) entries.push(...writeEntries(p, ckpt, chunkBytes));
      const path = join(weightsDir, file);
      written.push(path);
      const result = await writeSafetensors(path, entries, { metadata: { format: 'pt' } });
      shards.push({ file: `${WEIGHTS_DIR}/${file}`, size: result.size, sha256: result.sha256 });
      log(`wrote ${WEIGHTS_DIR}/${file}: ${entries.length} tensors, ${result.size} bytes`);
    }

    const tensors: Record<string, ManifestTensor> = {};
    for (const p of planned) tensors[p.name] = manifestEntry(p, shards[p.shard]!.file, tied);
    const manifest: QuantizationManifest = {
      format: contract().manifest_format as QuantizationManifest['format'],
      base_model: index.value.base_model,
      revision: index.value.revision,
      method: index.value.method,
      packing: manifestPacking(),
      shards: shards as QuantizationManifest['shards'],
      tensors,
    };
    const manifestPath = join(outDir, MANIFEST_FILE);
    const tmp = `${manifestPath}.tmp-${process.pid}`;
    await writeFile(tmp, `${JSON.stringify(manifest, null, 2)}\n`);
    await rename(tmp, manifestPath);

    const summary: PackSummary = { tensors: planned.length, ternary: 0, float: 0, exempt: 0, tied: tied !== null, shards: manifest.shards, bytes: 0, codes: 0, scales: 0, floats: 0 };
    for (const p of planned) {
      if (p.entry.exempt === true || isExempt(p.name)) summary.exempt++;
      if (p.ternary) {
        summary.ternary++;
        summary.codes += p.ternary.rows * p.ternary.cols;
        summary.scales += p.ternary.scaleShape[0] * p.ternary.scaleShape[1];
      } else {
        summary.float++;
        summary.floats += p.entry.shape.reduce((a, b) => a * b, 1);
      }
    }
    summary.bytes = shards.reduce((a, s) => a + s.size, 0);
    return ok(summary);
  } catch (e) {
    await Promise.all(written.map((p) => rm(p, { force: true })));
    if (e instanceof PackAbort) return err(e.failure);
    if (e instanceof SafetensorsError) return err({ reason: 'invalid-safetensors', error: e.toJSON() });
    throw e;
  } finally {
    await ckpt.close();
  }
}

/** Validates every tensor against its stored bytes' header and assigns shards. */
function planTensors(index: InterchangeIndex, ckpt: Checkpoint, options: PackOptions): Result<{ planned: Planned[]; tied: string | null; shardCount: number }, PackFailure> {
  const names = Object.keys(index.tensors).sort(byteOrder);
  const claimed = new Set<string>();
  const planned: Planned[] = [];
  const { output_head: HEAD, embedding_suffix: EMBED_SUFFIX } = contract().tensors;
  const embed = names.find((n) => n.endsWith(EMBED_SUFFIX) && !isExempt(n)) ?? null;
  const tie = options.tieWordEmbeddings ?? (embed !== null && !names.includes(HEAD));
  if (tie && embed !== null && names.includes(HEAD)) return err({ reason: 'tied-head-present', tensor: embed, tiedTo: HEAD });

  for (const name of names) {
    const entry = index.tensors[name]!;
    if (!index.files.includes(entry.file)) return err({ reason: 'interchange-tensor-missing', tensor: name, file: entry.file });
    const stored = ckpt.tensors.get(name);
    if (!stored || stored.file !== entry.file) return err({ reason: 'interchange-tensor-missing', tensor: name, file: entry.file });
    claimed.add(name);
    const shapeText = JSON.stringify(entry.shape);
    if (JSON.stringify(stored.info.shape) !== shapeText) {
      return err({ reason: 'interchange-tensor-mismatch', tensor: name, file: entry.file, field: 'shape', expected: shapeText, actual: JSON.stringify(stored.info.shape) });
    }
    if (entry.encoding === 'float') {
      if (stored.info.dtype !== entry.dtype) return err({ reason: 'interchange-tensor-mismatch', tensor: name, file: entry.file, field: 'dtype', expected: entry.dtype, actual: stored.info.dtype });
      planned.push({ name, entry, bytes: stored.info.end - stored.info.begin, ternary: null, shard: 0 });
      continue;
    }
    if (stored.info.dtype !== 'I8') return err({ reason: 'interchange-tensor-mismatch', tensor: name, file: entry.file, field: 'dtype', expected: 'I8', actual: stored.info.dtype });
    if (entry.shape.length !== 2) return err({ reason: 'interchange-tensor-mismatch', tensor: name, file: entry.file, field: 'shape', expected: '[out, in]', actual: shapeText });
    if (!isDtype(entry.dtype)) return err({ reason: 'interchange-tensor-mismatch', tensor: name, file: entry.file, field: 'dtype', expected: 'a safetensors dtype', actual: entry.dtype });
    const [rows, cols] = entry.shape as [number, number];
    if (entry.group_size === undefined) return err({ reason: 'missing-group-size', tensor: name });
    const g = checkGroupSize(name, entry.group_size, cols);
    if (!g.ok) return err(g.error);
    const scaleName = `${name}.scale`;
    const scale = ckpt.tensors.get(scaleName);
    if (!scale) return err({ reason: 'interchange-tensor-missing', tensor: scaleName, file: entry.file });
    claimed.add(scaleName);
    const scaleShape: [number, number] = [rows, cols / g.value];
    if (scale.info.dtype !== 'F32' || JSON.stringify(scale.info.shape) !== JSON.stringify(scaleShape)) {
      return err({ reason: 'scale-shape-mismatch', tensor: name, expected: `F32 ${JSON.stringify(scaleShape)}`, actual: `${scale.info.dtype} ${JSON.stringify(scale.info.shape)}` });
    }
    planned.push({ name, entry, bytes: (rows * cols) / CODES_PER_BYTE + byteSize('F32', scaleShape), ternary: { rows, cols, groupSize: g.value, scaleShape }, shard: 0 });
  }
  for (const [tensor, { file }] of [...ckpt.tensors].sort(([a], [b]) => byteOrder(a, b))) {
    if (!claimed.has(tensor)) return err({ reason: 'unexpected-tensor', tensor, file });
  }

  const cap = options.shardBytes ?? DEFAULT_SHARD_BYTES;
  let shard = 0;
  let used = 0;
  for (const p of planned) {
    if (used > 0 && used + p.bytes > cap) {
      shard++;
      used = 0;
    }
    p.shard = shard;
    used += p.bytes;
  }
  return ok({ planned, tied: tie ? embed : null, shardCount: shard + 1 });
}

/** The shard entries of one planned tensor, each with a lazy chunk source. */
function writeEntries(p: Planned, ckpt: Checkpoint, chunkBytes: number): WriteEntry[] {
  if (!p.ternary) {
    return [{ name: p.name, dtype: p.entry.dtype as WriteEntry['dtype'], shape: p.entry.shape, data: () => ckpt.streamTensor(p.name, chunkBytes) }];
  }
  const { rows, cols, scaleShape } = p.ternary;
  return [
    { name: `${p.name}.codes`, dtype: 'U8', shape: [rows, cols / CODES_PER_BYTE], data: () => packStream(p.name, cols, ckpt.streamTensor(p.name, chunkBytes)) },
    { name: `${p.name}.scale`, dtype: 'F32', shape: scaleShape, data: () => ckpt.streamTensor(`${p.name}.scale`, chunkBytes) },
  ];
}

/** Packs a stream of int8 chunks (each a multiple of 4 bytes long) into packed chunks. */
async function* packStream(tensor: string, cols: number, chunks: AsyncIterable<Buffer>): AsyncGenerator<Uint8Array> {
  let offset = 0;
  for await (const chunk of chunks) {
    const out = new Uint8Array(chunk.length / CODES_PER_BYTE);
    const bad = packInto(chunk, out);
    if (bad >= 0) {
      const at = offset + bad;
      throw new PackAbort({ reason: 'invalid-ternary-value', tensor, row: Math.floor(at / cols), col: at % cols, value: (chunk[bad]! << 24) >> 24 });
    }
    offset += chunk.length;
    yield out;
  }
}

function manifestEntry(p: Planned, shard: string, tied: string | null): ManifestTensor {
  const base: ManifestTensor = p.ternary
    ? { encoding: 'packed_2bit', shape: [...p.entry.shape], dtype: p.entry.dtype, group_size: p.ternary.groupSize, shard, codes_key: `${p.name}.codes`, scale_key: `${p.name}.scale` }
    : { encoding: 'float', shape: [...p.entry.shape], dtype: p.entry.dtype, shard, data_key: p.name };
  if (p.name === tied) base.tied_to = [contract().tensors.output_head];
  if (p.entry.exempt === true || isExempt(p.name)) base.exempt = true;
  return base;
}

function byteOrder(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));
}
