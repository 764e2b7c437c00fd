import { mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Ajv } from 'ajv';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BLOCK, checkGroupSize, packCodes, packInto, packWords, unpackCodes, unpackInto, unpackWords } from '../lib/pack/layout.ts';
import { packInterchange } from '../lib/pack/pack-interchange.ts';
import { generateAll as generateWasm } from '../scripts/gen-wasm.ts';
import { openSafetensors } from '../lib/safetensors/reader.ts';
import type { QuantizationManifest } from '../schemas/generated/manifest.ts';
import { toyQwenTensors, writeInterchange } from './fixtures/safetensors/generate.ts';

const root = join(import.meta.dirname, '..');
let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'tf-pack-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const bytesOf = (a: Int8Array): Uint8Array => new Uint8Array(a.buffer, a.byteOffset, a.length);

describe('the 2-bit layout', () => {
  it('golden byte: t = [-1, 0, 1, -1] packs to 0x24', () => {
    expect(packCodes(new Int8Array([-1, 0, 1, -1]), 1, 4)).toEqual({ ok: true, value: new Uint8Array([0x24]) });
    expect(unpackCodes(new Uint8Array([0x24]), 1, 4)).toEqual({ ok: true, value: new Int8Array([-1, 0, 1, -1]) });
    // each field in place: c0 in bits 0-1 ... c3 in bits 6-7
    expect(packCodes(new Int8Array([1, -1, -1, -1, -1, -1, -1, 1]), 1, 8)).toEqual({ ok: true, value: new Uint8Array([0b10, 0b10_000000]) });
  });

  it('round-trips any ternary matrix with cols % 4 == 0, at any alignment', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 9 }), fc.integer({ min: 0, max: 40 }), fc.integer({ min: 0, max: 3 }), fc.infiniteStream(fc.integer({ min: -1, max: 1 })), (rows, quads, shift, stream) => {
        const cols = quads * 4;
        const backing = new Int8Array(rows * cols + shift);
        const values = backing.subarray(shift);
        const it = stream[Symbol.iterator]();
        for (let i = 0; i < values.length; i++) values[i] = it.next().value as number;
        const packed = packCodes(values, rows, cols);
        if (!packed.ok) throw new Error(JSON.stringify(packed.error));
        expect(packed.value.length).toBe((rows * cols) / 4);
        // The reference formula, byte by byte.
        for (let b = 0; b < packed.value.length; b++) {
          const c = [0, 1, 2, 3].map((k) => values[4 * b + k]! + 1);
          expect(packed.value[b]).toBe(c[0]! | (c[1]! << 2) | (c[2]! << 4) | (c[3]! << 6));
        }
        const shifted = new Uint8Array(packed.value.length + shift).subarray(shift);
        shifted.set(packed.value);
        const back = unpackCodes(shifted, rows, cols);
        expect(back).toEqual({ ok: true, value: new Int8Array(values) });
      }),
      { numRuns: 300 },
    );
  });

  it('rejects any byte with a 0b11 field on unpack, naming the first one', () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 1, maxLength: 64 }), fc.nat(), fc.integer({ min: 0, max: 3 }), (bytes, at, field) => {
        const data = bytes.map((b) => b & 0b01010101 & ~(b >> 1)); // fields 0 or 1 only: valid
        const pos = at % data.length;
        data[pos] = data[pos]! | (0b11 << (2 * field));
        const r = unpackCodes(data, 1, data.length * 4);
        expect(r.ok).toBe(false);
        if (!r.ok) expect(r.error).toMatchObject({ reason: 'invalid-code', index: pos });
        expect(unpackInto(data, new Int8Array(data.length * 4))).toBe(pos);
      }),
      { numRuns: 300 },
    );
  });

  it('rejects values outside {-1, 0, 1} on pack, naming the first one', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 30 }), fc.nat(), fc.integer({ min: -128, max: 127 }).filter((x) => x < -1 || x > 1), (quads, at, bad) => {
        const values = new Int8Array(quads * 4).fill(1);
        const pos = at % values.length;
        values[pos] = bad;
        expect(packCodes(values, 1, values.length)).toEqual({ ok: false, error: { reason: 'invalid-ternary-value', index: pos, value: bad } });
        expect(packInto(values, new Uint8Array(quads))).toBe(pos);
      }),
      { numRuns: 300 },
    );
  });

  it('the SIMD kernels agree with the scalar word kernels across block runs, and name the same first bad index', () => {
    const next = ((): (() => number) => {
      let x = 12345;
      return () => ((x = (x * 1103515245 + 12345) >>> 0) >>> 16) % 3;
    })();
    const n = 2 * BLOCK + 68; // two whole block runs, a partial 64-code block run, and a 4-code scalar tail
    const values = new Int8Array(n).map(() => next() - 1);
    const simd = new Uint8Array(n / 4);
    const scalar = new Uint8Array(n / 4);
    expect(packInto(values, simd)).toBe(-1);
    expect(packWords(values, scalar)).toBe(-1);
    expect(Buffer.compare(simd, scalar)).toBe(0);
    const back = new Int8Array(n);
    const backScalar = new Int8Array(n);
    expect(unpackInto(simd, back)).toBe(-1);
    expect(unpackWords(simd, backScalar)).toBe(-1);
    expect(Buffer.compare(bytesOf(back), bytesOf(values))).toBe(0);
    expect(Buffer.compare(bytesOf(backScalar), bytesOf(values))).toBe(0);
    for (const at of [0, BLOCK - 1, BLOCK, 2 * BLOCK + 63, n - 1]) {
      const bad = new Int8Array(values);
      bad[at] = at % 2 === 0 ? 2 : -2;
      expect(packInto(bad, new Uint8Array(n / 4))).toBe(at);
      const codes = new Uint8Array(simd);
      const byte = Math.floor(at / 4);
      codes[byte] = codes[byte]! | (0b11 << (2 * (at % 4)));
      expect(unpackInto(codes, new Int8Array(n))).toBe(byte);
    }
  });

  it('the compiled kernels are not stale (npm run gen:wasm): lib/pack/kernels.wasm.ts, lib/audit/scan.wasm.ts', async () => {
    const generated = await generateWasm();
    expect(generated.map((g) => g.path.slice(root.length + 1)).sort()).toEqual(['lib/audit/scan.wasm.ts', 'lib/pack/kernels.wasm.ts']);
    for (const g of generated) expect(await readFile(g.path, 'utf8'), g.path).toBe(g.text);
  });

  it('refuses shapes whose row length is not a multiple of 4', () => {
    expect(packCodes(new Int8Array(6), 2, 3).ok).toBe(false);
    expect(unpackCodes(new Uint8Array(2), 1, 6).ok).toBe(false);
  });

  it('accepts only group sizes that are multiples of 4 dividing the row length', () => {
    expect(checkGroupSize('t', 32, 576)).toEqual({ ok: true, value: 32 });
    expect(checkGroupSize('t', 64, 576)).toEqual({ ok: true, value: 64 });
    expect(checkGroupSize('t', 576, 576)).toEqual({ ok: true, value: 576 });
    for (const g of [128, 6, 0, -4, 2, 1152, 3.5]) {
      expect(checkGroupSize('t', g, 576)).toEqual({ ok: false, error: { reason: 'invalid-group-size', tensor: 't', groupSize: g, rowLength: 576 } });
    }
  });
});

async function manifestValidator(): Promise<(x: unknown) => boolean> {
  const schema = JSON.parse(await readFile(join(root, 'schemas/manifest.schema.json'), 'utf8')) as object;
  return new Ajv({ allErrors: true }).compile(schema);
}

describe('packInterchange', () => {
  const tensors = toyQwenTensors(128, 4);

  it('writes shards and a manifest that decode back to the interchange exactly', async () => {
    const inter = join(dir, 'inter');
    const truth = await writeInterchange(inter, tensors);
    const out = join(dir, 'out');
    const r = await packInterchange(inter, out, { shardBytes: 200_000 });
    if (!r.ok) throw new Error(JSON.stringify(r.error));
    const manifest = JSON.parse(await readFile(join(out, 'quantization_manifest.json'), 'utf8')) as QuantizationManifest;
    expect((await manifestValidator())(manifest)).toBe(true);
    expect(manifest.shards.length).toBeGreaterThan(1);
    expect(manifest.shards.map((s) => s.file)).toEqual(manifest.shards.map((_, k) => `weights/model-${String(k + 1).padStart(5, '0')}-of-${String(manifest.shards.length).padStart(5, '0')}.safetensors`));
    expect(Object.keys(manifest.tensors).sort()).toEqual(tensors.map((t) => t.name));
    expect(r.value).toMatchObject({ tensors: tensors.length, ternary: truth.codes.size, float: truth.floats.size, exempt: 2, tied: true });

    const embed = manifest.tensors['model.language_model.embed_tokens.weight']!;
    expect(embed).toEqual({ encoding: 'float', shape: [512, 128], dtype: 'BF16', shard: embed.shard, data_key: 'model.language_model.embed_tokens.weight', tied_to: ['lm_head.weight'] });
    expect(manifest.tensors['mtp.fc.weight']!.exempt).toBe(true);
    expect(manifest.tensors['model.visual.patch_embed.proj.weight']!.exempt).toBe(true);
    expect(manifest.tensors['model.language_model.norm.weight']!.exempt).toBeUndefined();

    for (const shard of manifest.shards) {
      const bytes = await readFile(join(out, shard.file));
      expect(bytes.length).toBe(shard.size);
      const { createHash } = await import('node:crypto');
      expect(createHash('sha256').update(bytes).digest('hex')).toBe(shard.sha256);
    }
    for (const [name, t] of Object.entries(manifest.tensors)) {
      const f = await openSafetensors(join(out, t.shard));
      if (!f.ok) throw f.error;
      if (t.encoding === 'packed_2bit') {
        const [rows, cols] = t.shape as [number, number];
        expect(t.group_size).toBe(32);
        expect(f.value.get(t.codes_key!)).toMatchObject({ dtype: 'U8', shape: [rows, cols / 4] });
        expect(f.value.get(t.scale_key!)).toMatchObject({ dtype: 'F32', shape: [rows, cols / 32] });
        expect(unpackCodes(new Uint8Array(await f.value.readTensor(t.codes_key!)), rows, cols)).toEqual({ ok: true, value: truth.codes.get(name) });
        expect(await f.value.readTensor(t.scale_key!)).toEqual(truth.scales.get(name));
      } else {
        expect(f.value.get(t.data_key!)).toMatchObject({ dtype: t.dtype, shape: t.shape });
        expect(await f.value.readTensor(t.data_key!)).toEqual(truth.floats.get(name));
      }
      await f.value.close();
    }
  });

  it('is deterministic: the same input gives the same bytes', async () => {
    const inter = join(dir, 'inter-det');
    await writeInterchange(inter, tensors);
    const a = join(dir, 'det-a');
    const b = join(dir, 'det-b');
    expect((await packInterchange(inter, a, { chunkBytes: 4096 })).ok).toBe(true);
    expect((await packInterchange(inter, b)).ok).toBe(true);
    expect(await readFile(join(a, 'quantization_manifest.json'))).toEqual(await readFile(join(b, 'quantization_manifest.json')));
    for (const f of await readdir(join(a, 'weights'))) expect(await readFile(join(a, 'weights', f))).toEqual(await readFile(join(b, 'weights', f)));
  });

  const refusals: Array<[string, Parameters<typeof writeInterchange>[2], Record<string, unknown>]> = [
    ['g not dividing the row', { groupSize: 48 }, { reason: 'invalid-group-size', groupSize: 48, rowLength: 128 }],
    ['g below the schema minimum of 4', { groupSize: 2 }, { reason: 'invalid-interchange-index' }],
    ['g a multiple of 4 not dividing the row', { groupSize: 12 }, { reason: 'invalid-group-size', groupSize: 12, rowLength: 128 }],
    ['a code outside {-1,0,1}', { corruptTensor: 'model.language_model.layers.2.mlp.up_proj.weight' }, { reason: 'invalid-ternary-value', tensor: 'model.language_model.layers.2.mlp.up_proj.weight', row: 255, col: 125, value: 2 }],
    ['a scale of the wrong shape', { scaleShape: (n, [r, c]) => (n.endsWith('o_proj.weight') ? [r, c * 2] : [r, c]) }, { reason: 'scale-shape-mismatch', tensor: 'model.language_model.layers.3.self_attn.o_proj.weight', expected: 'F32 [128,4]', actual: 'F32 [128,8]' }],
  ];
  it.each(refusals)('refuses %s and writes nothing', async (label, options, expected) => {
    const inter = join(dir, `inter-${label.replace(/\W+/g, '-')}`);
    await writeInterchange(inter, tensors, options);
    const out = join(dir, `out-${label.replace(/\W+/g, '-')}`);
    const r = await packInterchange(inter, out, { shardBytes: 100_000 });
    expect(r.ok ? null : r.error).toMatchObject(expected);
    expect(await readdir(out).catch(() => [])).toEqual(expect.not.arrayContaining(['quantization_manifest.json']));
    expect(await readdir(join(out, 'weights')).catch(() => [])).toEqual([]);
  });

  it('refuses an index that fails its schema, a tensor the index does not account for, and a mismatched dtype', async () => {
    const inter = join(dir, 'inter-index');
    await writeInterchange(inter, tensors);
    const index = JSON.parse(await readFile(join(inter, 'index.json'), 'utf8')) as { tensors: Record<string, Record<string, unknown>>; format: string };
    await writeFile(join(inter, 'index.json'), JSON.stringify({ ...index, format: 'other/2' }));
    const r1 = await packInterchange(inter, join(dir, 'o1'));
    expect(r1.ok ? null : r1.error).toMatchObject({ reason: 'invalid-interchange-index' });

    const { ['model.language_model.norm.weight']: _dropped, ...fewer } = index.tensors;
    await writeFile(join(inter, 'index.json'), JSON.stringify({ ...index, tensors: fewer }));
    const r2 = await packInterchange(inter, join(dir, 'o2'));
    expect(r2.ok ? null : r2.error).toMatchObject({ reason: 'unexpected-tensor', tensor: 'model.language_model.norm.weight' });

    const wrong = { ...index.tensors, 'model.language_model.norm.weight': { ...index.tensors['model.language_model.norm.weight'], dtype: 'F16' } };
    await writeFile(join(inter, 'index.json'), JSON.stringify({ ...index, tensors: wrong }));
    const r3 = await packInterchange(inter, join(dir, 'o3'));
    expect(r3.ok ? null : r3.error).toMatchObject({ reason: 'interchange-tensor-mismatch', tensor: 'model.language_model.norm.weight', field: 'dtype', expected: 'F16', actual: 'BF16' });

    await writeFile(join(inter, 'index.json'), JSON.stringify(index));
    const r4 = await packInterchange(inter, join(dir, 'o4'), { tieWordEmbeddings: false });
    if (!r4.ok) throw new Error(JSON.stringify(r4.error));
    const m = JSON.parse(await readFile(join(dir, 'o4', 'quantization_manifest.json'), 'utf8')) as QuantizationManifest;
    expect(m.tensors['model.language_model.embed_tokens.weight']!.tied_to).toBeUndefined();
  });
});
