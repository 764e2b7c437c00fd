/**
 * schemas/contract.json, the TypeScript side: the packer reaches its golden bytes, the audit's gates and
 * exempt set are its values, pack writes its packing and format, emit ships it to the server.
 * python/tests/test_contract.py holds the Python side to the same file.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';
import { computeGates } from '../lib/audit/gates.ts';
import { textModelFilter } from '../lib/audit/source.ts';
import { contract, CONTRACT_PATH, isEmbeddingOrHead, isExemptName, readContract } from '../lib/contract.ts';
import { CODE_BITS, CODES_PER_BYTE, INVALID_CODE, checkGroupSize, packCodes, unpackCodes } from '../lib/pack/layout.ts';
import { manifestPacking } from '../lib/pack/pack-interchange.ts';
import { submissionNames } from '../lib/submission/layout.ts';

const root = join(import.meta.dirname, '..');
const file = JSON.parse(readFileSync(join(root, 'schemas', 'contract.json'), 'utf8')) as ReturnType<typeof contract>;
const hex = (b: Uint8Array): string => Buffer.from(b).toString('hex');

describe('contract', () => {
  test('schemas/contract.json passes its schema and is what lib/contract.ts serves', () => {
    expect(CONTRACT_PATH).toBe(join(root, 'schemas', 'contract.json'));
    expect(readContract()).toEqual(file);
    expect(contract()).toEqual(file);
  });

  test('a contract that breaks its schema is refused naming the file', () => {
    const bad = join(root, 'schemas', 'manifest.schema.json');
    expect(() => readContract(bad)).toThrow(/manifest\.schema\.json fails schemas\/contract\.schema\.json/);
  });

  test('the packer reaches every golden byte, also through the SIMD kernels (rows tiled to 256 codes)', () => {
    for (const g of file.packing.golden) {
      const rows = g.ternary.length;
      const cols = g.ternary[0]!.length;
      expect(packCodes(Int8Array.from(g.ternary.flat()), rows, cols)).toEqual({ ok: true, value: new Uint8Array(Buffer.from(g.packed_hex, 'hex')) });
      expect(unpackCodes(new Uint8Array(Buffer.from(g.packed_hex, 'hex')), rows, cols)).toEqual({ ok: true, value: Int8Array.from(g.ternary.flat()) });
      const times = 256 / cols;
      const tiled = Int8Array.from(g.ternary.flatMap((row) => Array.from({ length: times }, () => row).flat()));
      const want = g.ternary.map((_, r) => g.packed_hex.slice((r * cols) / 2, ((r + 1) * cols) / 2).repeat(times)).join('');
      const packed = packCodes(tiled, rows, 256);
      expect(packed.ok && hex(packed.value)).toBe(want);
    }
  });

  test('the unpacker refuses every invalid byte of the contract', () => {
    for (const byte of file.packing.invalid_bytes) {
      const r = unpackCodes(new Uint8Array([byte]), 1, file.packing.codes_per_byte);
      expect(r.ok ? 'accepted' : r.error.reason).toBe('invalid-code');
    }
  });

  test("the kernels' constants are the contract's", () => {
    expect({ code_bits: CODE_BITS, codes_per_byte: CODES_PER_BYTE, invalid_code: INVALID_CODE }).toEqual({
      code_bits: file.packing.code_bits,
      codes_per_byte: file.packing.codes_per_byte,
      invalid_code: file.packing.invalid_code,
    });
    expect(checkGroupSize('t', file.packing.group_size_multiple, 64).ok).toBe(true);
    expect(checkGroupSize('t', file.packing.group_size_multiple + 2, 64).ok).toBe(false);
  });

  test('exempt means: the name starts with a contract prefix (nowhere else, never without the dot)', () => {
    const names = ['visual.blocks.0.weight', 'model.language_model.visual.x.weight', 'model.language_model.layers.0.mtp.fc.weight', 'model.mtp.fc.weight', 'lm_head.weight'];
    for (const p of file.tensors.exempt_prefixes) names.push(`${p}fc.weight`, `${p.slice(0, -1)}x.weight`, `model.language_model.${p}fc.weight`);
    const isText = textModelFilter(names);
    for (const n of names) {
      const want = file.tensors.exempt_prefixes.some((p) => n.startsWith(p));
      expect({ n, exempt: isExemptName(n) }).toEqual({ n, exempt: want });
      if (want) expect(isText(n)).toBe(false);
    }
    expect(isEmbeddingOrHead(file.tensors.output_head)).toBe(true);
    expect(isEmbeddingOrHead(`model.language_model.${file.tensors.embedding_suffix}`)).toBe(true);
  });

  test("gate 1 fails at exactly the contract's floor and passes above it; gate 2 passes at exactly its ceiling", () => {
    // 3040 codes + 95 scales + 65 floats: 3040 / 3200, exactly the floor.
    const at = computeGates([{ name: 'w', original: 3200, codes: 3040, scales: 95, floats: 65 }]);
    expect(at.ternary_fraction).toBe(file.gates.ternary_fraction_min);
    expect(at.ternary_fraction_pass).toBe(false);
    expect(computeGates([{ name: 'w', original: 3200, codes: 3040, scales: 95, floats: 64 }]).ternary_fraction_pass).toBe(true);
    const ceiling = computeGates([{ name: 'w', original: 1000, codes: 1000 * file.gates.stored_ratio_max, scales: 0, floats: 0 }]);
    expect(ceiling.stored_ratio_pass).toBe(true);
    expect(computeGates([{ name: 'w', original: 1000, codes: 1000 * file.gates.stored_ratio_max + 1, scales: 0, floats: 0 }]).stored_ratio_pass).toBe(false);
  });

  test("pack writes the contract's packing, which manifest.schema.json pins, and the submission names are the contract's", () => {
    expect(manifestPacking()).toEqual(file.packing.manifest);
    const schema = JSON.parse(readFileSync(join(root, 'schemas', 'manifest.schema.json'), 'utf8')) as { properties: { format: { const: string }; packing: { properties: Record<string, { const: string }> } } };
    expect(schema.properties.format.const).toBe(file.manifest_format);
    expect(Object.fromEntries(Object.entries(schema.properties.packing.properties).map(([k, v]) => [k, v.const]))).toEqual(file.packing.manifest);
    const n = submissionNames();
    expect([n.SERVE_SH, n.MANIFEST, n.ARCHITECTURE, n.WEIGHTS_DIR, n.WHEELS_DIR, n.EVIDENCE_DIR, n.REQUIREMENTS, n.SERVER_DIR, n.SERVER_PACKAGE, n.CONTRACT]).toEqual([
      file.submission.entrypoint, file.submission.manifest, file.submission.architecture, file.submission.weights_dir, file.submission.wheels_dir,
      file.submission.evidence_dir, file.submission.requirements, file.submission.server_dir, file.submission.server_package, file.submission.contract,
    ]);
  });
});
