import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openCheckpoint } from '../lib/safetensors/checkpoint.ts';
import { SafetensorsError } from '../lib/safetensors/errors.ts';
import { openSafetensors } from '../lib/safetensors/reader.ts';
import { writeSafetensors, type WriteEntry } from '../lib/safetensors/writer.ts';
import { malformedCorpus, rawFile, toyQwenTensors, writeSourceCheckpoint } from './fixtures/safetensors/generate.ts';

const root = join(import.meta.dirname, '..');
const python = join(root, '.ternforge/venv/bin/python');
let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'tf-safetensors-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

function py(code: string): string {
  const r = spawnSync(python, ['-c', code], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`python failed: ${r.stderr}`);
  return r.stdout;
}

const f32 = (values: number[]): Buffer => Buffer.from(new Float32Array(values).buffer);

describe('writer and reader', () => {
  it('round-trips buffers and chunk sources, reading only the requested ranges', async () => {
    const path = join(dir, 'rt.safetensors');
    const big = Buffer.alloc(10_000);
    for (let i = 0; i < big.length; i++) big[i] = (i * 31) & 0xff;
    const result = await writeSafetensors(path, [
      { name: 'w', dtype: 'F32', shape: [2, 2], data: f32([1, 2, 3, 4]) },
      { name: 'big', dtype: 'U8', shape: [100, 100], data: () => [big.subarray(0, 3333), big.subarray(3333)] },
      { name: 'scalar', dtype: 'I64', shape: [], data: Buffer.alloc(8, 1) },
      { name: 'empty', dtype: 'BF16', shape: [0, 5], data: Buffer.alloc(0) },
    ], { metadata: { format: 'pt' } });
    const bytes = await readFile(path);
    expect(result.size).toBe(bytes.length);
    expect(result.order).toEqual(['scalar', 'w', 'empty', 'big']); // I64, F32, BF16, U8: dtype rank, then name
    const f = await openSafetensors(path);
    if (!f.ok) throw f.error;
    expect(f.value.metadata).toEqual({ format: 'pt' });
    expect(f.value.names()).toEqual(['scalar', 'w', 'empty', 'big']);
    expect(Buffer.from(await f.value.readTensor('w'))).toEqual(f32([1, 2, 3, 4]));
    expect(Buffer.from(await f.value.readTensor('big'))).toEqual(big);
    const chunks: Buffer[] = [];
    for await (const c of f.value.streamTensor('big', 4096)) chunks.push(c);
    expect(chunks.map((c) => c.length)).toEqual([4096, 4096, 1808]);
    expect(Buffer.concat(chunks)).toEqual(big);
    expect((await f.value.readTensor('empty')).length).toBe(0);
    await expect(f.value.readTensor('nope')).rejects.toMatchObject({ reason: 'unknown-tensor', tensor: 'nope' });
    await f.value.close();
    expect(await readdir(dir)).toEqual(['rt.safetensors']);
  });

  it('refuses a source of the wrong length and leaves no file behind', async () => {
    const sub = await mkdtemp(join(dir, 'bad-'));
    await expect(writeSafetensors(join(sub, 'x.safetensors'), [{ name: 'a', dtype: 'F32', shape: [3], data: () => [Buffer.alloc(8)] }])).rejects.toThrow(/needs 12 bytes, its data gave 8/);
    await expect(writeSafetensors(join(sub, 'x.safetensors'), [{ name: 'a', dtype: 'U8', shape: [3], data: async function* () { yield Buffer.alloc(2); throw new Error('source failed'); } }])).rejects.toThrow('source failed');
    expect(await readdir(sub)).toEqual([]);
  });

  it('writes the same bytes as the Python safetensors library, which reads them back exactly', async () => {
    const entries: WriteEntry[] = [
      { name: 'b', dtype: 'F32', shape: [2], data: f32([1.5, -2]) },
      { name: 'a', dtype: 'U8', shape: [3], data: Buffer.from([1, 2, 3]) },
      { name: 'c', dtype: 'F64', shape: [1], data: Buffer.from(new Float64Array([3.25]).buffer) },
      { name: 'd', dtype: 'F16', shape: [2], data: Buffer.from([0, 60, 0, 188]) },
      { name: 'e', dtype: 'I8', shape: [1, 1], data: Buffer.from([255]) },
      { name: 'g', dtype: 'I64', shape: [1], data: Buffer.from(new BigInt64Array([-5n]).buffer) },
      { name: 'A', dtype: 'F32', shape: [0], data: Buffer.alloc(0) },
      { name: 's', dtype: 'F32', shape: [], data: f32([7]) },
      { name: 'k', dtype: 'I16', shape: [1], data: Buffer.from([1, 0]) },
      { name: 'h', dtype: 'BF16', shape: [2], data: Buffer.from([0x80, 0x3f, 0, 0x40]) },
      { name: 'f8', dtype: 'F8_E4M3', shape: [2], data: Buffer.from([0x38, 0x40]) },
      { name: 'ü', dtype: 'BOOL', shape: [1], data: Buffer.from([1]) },
    ];
    const ours = join(dir, 'ours.safetensors');
    // One metadata key: Python keeps __metadata__ in a hash map, so its order of several keys is unspecified.
    await writeSafetensors(ours, entries, { metadata: { format: 'pt' } });
    const theirs = join(dir, 'theirs.safetensors');
    const out = py(`
import torch, json
from safetensors.torch import load_file, save_file
t = load_file(${JSON.stringify(ours)})
save_file(t, ${JSON.stringify(theirs)}, metadata={"format": "pt"})
print(json.dumps({k: [str(v.dtype), list(v.shape), v.float().flatten().tolist()] for k, v in sorted(t.items())}))
`);
    const loaded = JSON.parse(out) as Record<string, [string, number[], number[]]>;
    expect(loaded['b']).toEqual(['torch.float32', [2], [1.5, -2]]);
    expect(loaded['g']).toEqual(['torch.int64', [1], [-5]]);
    expect(loaded['e']).toEqual(['torch.int8', [1, 1], [-1]]);
    expect(loaded['h']).toEqual(['torch.bfloat16', [2], [1, 2]]);
    expect(loaded['s']).toEqual(['torch.float32', [], [7]]);
    expect(loaded['ü']).toEqual(['torch.bool', [1], [1]]);
    expect(Object.keys(loaded)).toHaveLength(entries.length);
    // Byte-identical files: same sort, same JSON, same padding.
    expect(await readFile(theirs)).toEqual(await readFile(ours));
    // And our reader reads a file Python wrote from scratch.
    const native = join(dir, 'native.safetensors');
    py(`
import numpy as np
from safetensors.numpy import save_file
save_file({"x": np.arange(6, dtype=np.float32).reshape(2, 3), "y": np.array([1, 2], dtype=np.int16)}, ${JSON.stringify(native)})
`);
    const f = await openSafetensors(native);
    if (!f.ok) throw f.error;
    expect(f.value.get('x')).toMatchObject({ dtype: 'F32', shape: [2, 3] });
    expect([...new Float32Array(new Uint8Array(await f.value.readTensor('x')).buffer)]).toEqual([0, 1, 2, 3, 4, 5]);
    expect([...new Int16Array(new Uint8Array(await f.value.readTensor('y')).buffer)]).toEqual([1, 2]);
    await f.value.close();
  });
});

describe('malformed files', () => {
  const corpus = malformedCorpus();
  it.each(corpus.map((c) => [c.name, c] as const))('%s is rejected with its own reason', async (_name, c) => {
    const path = join(dir, `bad-${c.name}.safetensors`);
    await writeFile(path, c.bytes);
    const r = await openSafetensors(path);
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.error).toBeInstanceOf(SafetensorsError);
    expect(r.error.reason).toBe(c.reason);
    expect(r.error.file).toBe(path);
    if (c.tensor !== undefined) expect(r.error.tensor).toBe(c.tensor);
  });

  it('covers every reader reason', () => {
    const reasons = new Set(corpus.map((c) => c.reason));
    for (const r of ['header-too-small', 'header-too-large', 'invalid-header-length', 'invalid-header-utf8', 'invalid-header-json', 'duplicate-key', 'invalid-header-structure', 'unknown-dtype', 'shape-overflow', 'span-mismatch', 'offsets-gap', 'offsets-overlap', 'trailing-bytes', 'truncated-data'] as const) {
      expect(reasons.has(r), r).toBe(true);
    }
  });

  // The reference rejects a field named twice (serde: "duplicate field"); for tensor names and metadata keys
  // it keeps the last, as JSON.parse does; this reader refuses all of them: a header has one meaning.
  it('a duplicate field: the Python reference rejects it too', async () => {
    for (const c of corpus.filter((x) => x.name === 'duplicate-field-key')) {
      const path = join(dir, `py-${c.name}.safetensors`);
      await writeFile(path, c.bytes);
      const out = py(`
from safetensors import safe_open
try:
    with safe_open(${JSON.stringify(path)}, "np") as f:
        print("accepted", list(f.keys()))
except Exception as e:
    print("rejected", e)
`);
      expect(out.trim(), c.name).toMatch(/^rejected/);
    }
  });

  // The served loader opens shards with the safetensors library; its refusals are named in the audit's
  // words (ternforge_server.loader.safetensors_reason), so `verify` and the server say the same thing.
  it("the server's loader names each file the library refuses with the audit's reason", async () => {
    const cases = corpus.map((c) => ({ ...c, path: join(dir, `srv-${c.name}.safetensors`) }));
    for (const c of cases) await writeFile(c.path, c.bytes);
    const out = py(`
import json, sys
sys.path.insert(0, ${JSON.stringify(join(root, 'python'))})
from safetensors import SafetensorError, safe_open
from ternforge_server.loader import SAFETENSORS_REASONS, safetensors_reason
out = {"names": sorted({r for _, r in SAFETENSORS_REASONS}), "cases": {}}
for name, path in json.loads(${JSON.stringify(JSON.stringify(cases.map((c) => [c.name, c.path])))}):
    try:
        with safe_open(path, "pt") as f:
            for k in f.keys():
                f.get_tensor(k)
        out["cases"][name] = None
    except SafetensorError as e:
        out["cases"][name] = [safetensors_reason(str(e), path), str(e)]
print(json.dumps(out))
`);
    const got = JSON.parse(out) as { names: string[]; cases: Record<string, [string, string] | null> };
    const union = [...readFileSync(join(root, 'lib/safetensors/errors.ts'), 'utf8').split('export type SafetensorsReason =')[1]!.split(';')[0]!.matchAll(/'([a-z0-9-]+)'/g)].map((m) => m[1]);
    for (const n of got.names) expect(union, n).toContain(n);
    const refused = cases.filter((c) => got.cases[c.name] !== null);
    expect(refused.length).toBeGreaterThanOrEqual(10);
    expect(refused.filter((c) => got.cases[c.name]![0] !== c.reason).map((c) => ({ case: c.name, audit: c.reason, server: got.cases[c.name] }))).toEqual([]);
  });

  it('gives the facts: expected and actual', async () => {
    const path = join(dir, 'facts.safetensors');
    await writeFile(path, rawFile({ a: { dtype: 'F32', shape: [3], data_offsets: [0, 8] } }, 8));
    const r = await openSafetensors(path);
    expect(r.ok ? null : r.error.toJSON()).toMatchObject({ reason: 'span-mismatch', tensor: 'a', expected: 12, actual: 8 });
  });

  it('never crashes on mutated files: valid, or a SafetensorsError', async () => {
    const seed = rawFile({ __metadata__: { k: 'v' }, a: { dtype: 'F32', shape: [2], data_offsets: [0, 8] }, b: { dtype: 'U8', shape: [4], data_offsets: [8, 12] } }, 12);
    const path = join(dir, 'fuzz.safetensors');
    await fc.assert(
      fc.asyncProperty(fc.array(fc.tuple(fc.nat(seed.length - 1), fc.integer({ min: 0, max: 255 })), { minLength: 1, maxLength: 4 }), fc.nat(seed.length), async (edits, cut) => {
        const bytes = Buffer.from(seed.subarray(0, Math.max(cut, seed.length - 2)));
        for (const [at, value] of edits) if (at < bytes.length) bytes[at] = value;
        await writeFile(path, bytes);
        const r = await openSafetensors(path);
        if (r.ok) await r.value.close();
        else expect(r.error).toBeInstanceOf(SafetensorsError);
      }),
      { numRuns: 300 },
    );
  });
});

describe('sharded checkpoints', () => {
  it('opens an index and checks each tensor is where the index says', async () => {
    const ck = join(dir, 'ckpt');
    const tensors = toyQwenTensors(128, 4);
    await writeSourceCheckpoint(ck, tensors);
    const opened = await openCheckpoint(ck);
    if (!opened.ok) throw opened.error;
    expect(opened.value.files).toEqual(['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors']);
    expect([...opened.value.tensors.keys()].sort()).toEqual(tensors.map((t) => t.name));
    const norm = await opened.value.readTensor('model.language_model.norm.weight');
    expect(norm.length).toBe(256);
    await opened.value.close();

    const index = JSON.parse(await readFile(join(ck, 'model.safetensors.index.json'), 'utf8')) as { weight_map: Record<string, string> };
    const moved = { ...index.weight_map, 'model.language_model.norm.weight': index.weight_map['model.language_model.norm.weight'] === 'model-00001-of-00002.safetensors' ? 'model-00002-of-00002.safetensors' : 'model-00001-of-00002.safetensors' };
    await writeFile(join(ck, 'model.safetensors.index.json'), JSON.stringify({ weight_map: moved }));
    const r1 = await openCheckpoint(ck);
    expect(r1.ok ? null : r1.error.reason).toBe('index-tensor-unlisted');

    await writeFile(join(ck, 'model.safetensors.index.json'), JSON.stringify({ weight_map: { ...index.weight_map, 'extra.weight': 'model-00001-of-00002.safetensors' } }));
    const r2 = await openCheckpoint(ck);
    expect(r2.ok ? null : r2.error.toJSON()).toMatchObject({ reason: 'index-tensor-missing', tensor: 'extra.weight' });

    await writeFile(join(ck, 'model.safetensors.index.json'), JSON.stringify({ weight_map: { ...index.weight_map, 'extra.weight': 'model-00003-of-00003.safetensors' } }));
    const r3 = await openCheckpoint(ck);
    expect(r3.ok ? null : r3.error.reason).toBe('index-file-missing');

    await writeFile(join(ck, 'model.safetensors.index.json'), '{"weight_map": 5}');
    const r4 = await openCheckpoint(ck);
    expect(r4.ok ? null : r4.error.reason).toBe('invalid-index');

    const r5 = await openCheckpoint(join(dir, 'nowhere'));
    expect(r5.ok ? null : r5.error.reason).toBe('no-checkpoint');
  });
});
