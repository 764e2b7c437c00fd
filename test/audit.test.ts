import { spawnSync } from 'node:child_process';
import { cp, mkdir, mkdtemp, readFile, rename, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { auditSubmission } from '../lib/audit/audit.ts';
import { computeGates, type CountedTensor } from '../lib/audit/gates.ts';
import { auditedSourceTensors, loadSourceCheckpoint, type SourceDescription } from '../lib/audit/source.ts';
import { isExemptName } from '../lib/contract.ts';
import { packInterchange } from '../lib/pack/pack-interchange.ts';
import { openSafetensors } from '../lib/safetensors/reader.ts';
import { writeSafetensors, type WriteEntry } from '../lib/safetensors/writer.ts';
import type { QuantizationManifest } from '../schemas/generated/manifest.ts';
import { qwen35_4bTensors, toyQwenTensors, writeInterchange, writeSourceCheckpoint } from './fixtures/safetensors/generate.ts';

const root = join(import.meta.dirname, '..');

/** The real Qwen3.5-4B text model's tensor list as a header-only source description. */
function qwen35_4b(): SourceDescription {
  return { origin: 'DESIGN.md section 4', tensors: qwen35_4bTensors().map((t) => ({ ...t })), tieWordEmbeddings: true };
}

const numel = (s: readonly number[]): number => s.reduce((a, b) => a * b, 1);

describe('check values of the real Qwen3.5-4B', () => {
  it('reproduces DESIGN.md: 426 text tensors, audited set 3,570,052,096 = 3,569,090,560 linear in 1,132,032 rows + 961,536 small', () => {
    const source = qwen35_4b();
    const text = source.tensors.filter((t) => t.name.startsWith('model.language_model.'));
    expect(text).toHaveLength(426);
    const audited = auditedSourceTensors(source);
    expect(audited).toHaveLength(425);
    expect(audited.some((t) => t.name.endsWith('embed_tokens.weight'))).toBe(false);
    const linear = audited.filter((t) => t.shape.length === 2);
    const small = audited.filter((t) => t.shape.length !== 2);
    expect(audited.reduce((a, t) => a + numel(t.shape), 0)).toBe(3_570_052_096);
    expect(linear.reduce((a, t) => a + numel(t.shape), 0)).toBe(3_569_090_560);
    expect(linear.reduce((a, t) => a + t.shape[0]!, 0)).toBe(1_132_032);
    expect(small.reduce((a, t) => a + numel(t.shape), 0)).toBe(961_536);
    // The reference submission's storage: every linear weight as codes with one scale per row, small in float.
    const rows: CountedTensor[] = audited.map((t) => (t.shape.length === 2 ? { name: t.name, original: numel(t.shape), codes: numel(t.shape), scales: t.shape[0]!, floats: 0 } : { name: t.name, original: numel(t.shape), codes: 0, scales: 0, floats: numel(t.shape) }));
    const g = computeGates(rows);
    expect(g.original).toBe(3_570_052_096);
    expect(g.stored).toBe(3_571_184_128);
    expect(g.ternary_fraction.toFixed(4)).toBe('0.9994');
    expect(g.ternary_fraction_pass && g.stored_ratio_pass).toBe(true);
  });
});

let dir: string;
let sourceDir: string;
let source: SourceDescription;
let good: string;
const tensors = toyQwenTensors(128, 4);

async function packed(name: string, options: Parameters<typeof writeInterchange>[2] = {}): Promise<string> {
  const inter = join(dir, `inter-${name}`);
  await writeInterchange(inter, tensors, options);
  const out = join(dir, name);
  const r = await packInterchange(inter, out, { shardBytes: 150_000 });
  if (!r.ok) throw new Error(JSON.stringify(r.error));
  return out;
}

async function copyOf(name: string): Promise<string> {
  const out = join(dir, name);
  await cp(good, out, { recursive: true });
  return out;
}

async function readManifest(d: string): Promise<QuantizationManifest> {
  return JSON.parse(await readFile(join(d, 'quantization_manifest.json'), 'utf8')) as QuantizationManifest;
}

async function writeManifest(d: string, m: QuantizationManifest): Promise<void> {
  await writeFile(join(d, 'quantization_manifest.json'), JSON.stringify(m, null, 2));
}

/** Rewrites one shard with `edit` applied to its tensors, then updates the manifest's size and sha256. */
async function rewriteShard(d: string, shard: string, edit: (entries: WriteEntry[]) => void): Promise<void> {
  const path = join(d, shard);
  const f = await openSafetensors(path);
  if (!f.ok) throw f.error;
  const entries: WriteEntry[] = [];
  for (const t of f.value.tensors) entries.push({ name: t.name, dtype: t.dtype, shape: [...t.shape], data: await f.value.readTensor(t.name) });
  await f.value.close();
  edit(entries);
  const w = await writeSafetensors(path, entries, { metadata: { format: 'pt' } });
  const m = await readManifest(d);
  const s = m.shards.find((x) => x.file === shard)!;
  s.size = w.size;
  s.sha256 = w.sha256;
  await writeManifest(d, m);
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'tf-audit-'));
  sourceDir = join(dir, 'source');
  await writeSourceCheckpoint(sourceDir, tensors);
  const s = await loadSourceCheckpoint(sourceDir);
  if (!s.ok) throw new Error(JSON.stringify(s.error));
  source = s.value;
  good = await packed('good');
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('audit of a packed submission', () => {
  it('passes a faithful pack, with counts recomputed from the stored bytes', async () => {
    const report = await auditSubmission(good, { source });
    expect(report.violations).toEqual([]);
    expect(report.pass).toBe(true);
    expect(report.source_coverage).toBe('checked');
    expect(report.shards.length).toBeGreaterThan(1);
    const audited = auditedSourceTensors(source);
    expect(report.counts.tensors).toBe(audited.length);
    expect(report.counts.original).toBe(audited.reduce((a, t) => a + numel(t.shape), 0));
    const ternary = audited.filter((t) => t.shape.length === 2 && !/in_proj_[ab]/.test(t.name));
    const codes = ternary.reduce((a, t) => a + numel(t.shape), 0);
    expect(report.counts.codes).toBe(codes);
    expect(report.counts.scales).toBe(codes / 32);
    expect(report.counts.floats).toBe(report.counts.original - codes);
    expect(report.counts.excluded).toEqual(['model.language_model.embed_tokens.weight']);
    expect(report.gates['ternary-fraction'].value).toBeCloseTo(codes / (codes + codes / 32 + report.counts.floats), 12);
    expect(report.shards.reduce((a, s) => a + s.code_bytes_scanned, 0)).toBe(codes / 4);
  });

  it('fails gate 1 when too much stays in float, and gate 2 when scales cost too much', async () => {
    const floaty = await packed('floaty', { keepFloat: (n) => n.includes('mlp.') || n.endsWith('embed_tokens.weight') || isExemptName(n) });
    const r1 = await auditSubmission(floaty, { source });
    expect(r1.failed_gates).toEqual(['ternary-fraction']);
    const heavy = await packed('heavy', { groupSize: 4 });
    const r2 = await auditSubmission(heavy, { source });
    expect(r2.failed_gates).toEqual(['ternary-fraction', 'stored-parameters']);
    expect(r2.gates['stored-parameters'].ratio).toBeGreaterThan(1.2);
  });

  it('fails gate 3 on one flipped byte in any shard', async () => {
    const m = await readManifest(good);
    for (const [k, shard] of m.shards.entries()) {
      const d = await copyOf(`flip-${k}`);
      const bytes = await readFile(join(d, shard.file));
      const at = Math.floor(bytes.length * 0.7);
      bytes[at] = bytes[at]! ^ 0x01;
      await writeFile(join(d, shard.file), bytes);
      const r = await auditSubmission(d, { source });
      expect(r.failed_gates).toContain('weight-audit');
      expect(r.violations).toContainEqual(expect.objectContaining({ gate: 'weight-audit', reason: 'shard-sha256-mismatch', shard: shard.file }));
    }
  });

  it('fails gate 3 when a manifest entry is removed', async () => {
    const d = await copyOf('removed');
    const m = await readManifest(d);
    delete m.tensors['model.language_model.layers.1.mlp.down_proj.weight'];
    await writeManifest(d, m);
    const r = await auditSubmission(d, { source });
    expect(r.failed_gates).toEqual(['weight-audit']);
    expect(r.violations).toContainEqual(expect.objectContaining({ reason: 'tensor-not-in-manifest', tensor: 'model.language_model.layers.1.mlp.down_proj.weight' }));
    expect(r.violations).toContainEqual(expect.objectContaining({ reason: 'unreferenced-stored-tensor', tensor: 'model.language_model.layers.1.mlp.down_proj.weight.codes' }));
    // The missing tensor still counts as original parameters: dropping it cannot shrink the audited set.
    expect(r.counts.original).toBe((await auditSubmission(good, { source })).counts.original);
  });

  it('fails gate 3 on a code set to 3, even with the manifest hashes updated', async () => {
    const d = await copyOf('code3');
    const m = await readManifest(d);
    const name = 'model.language_model.layers.3.self_attn.k_proj.weight';
    const t = m.tensors[name]!;
    await rewriteShard(d, t.shard, (entries) => {
      const e = entries.find((x) => x.name === t.codes_key)!;
      (e.data as Buffer)[17] = 0b00_11_00_01;
    });
    const r = await auditSubmission(d, { source });
    expect(r.failed_gates).toEqual(['weight-audit']);
    expect(r.violations).toEqual([expect.objectContaining({ reason: 'invalid-code', tensor: name, detail: expect.stringContaining('codes byte 17 = 0x31') })]);
  });

  it('fails gate 3 when a scale shape is changed', async () => {
    const d = await copyOf('scale');
    const m = await readManifest(d);
    const name = 'model.language_model.layers.0.mlp.up_proj.weight';
    const t = m.tensors[name]!;
    await rewriteShard(d, t.shard, (entries) => {
      const e = entries.find((x) => x.name === t.scale_key)!;
      e.shape = [e.shape[0]! * 2, e.shape[1]! / 2];
    });
    const r = await auditSubmission(d, { source });
    expect(r.failed_gates).toEqual(['weight-audit']);
    expect(r.violations).toEqual([expect.objectContaining({ reason: 'scale-shape-mismatch', tensor: name, expected: 'F32 [256,4]', actual: 'F32 [512,2]' })]);
  });

  it('never trusts an exempt flag on a text tensor, and counts a tensor the source lacks as float', async () => {
    const d = await copyOf('exempt');
    const m = await readManifest(d);
    m.tensors['model.language_model.layers.0.mlp.gate_proj.weight']!.exempt = true;
    await writeManifest(d, m);
    const r = await auditSubmission(d, { source });
    expect(r.violations).toContainEqual(expect.objectContaining({ reason: 'false-exemption', tensor: 'model.language_model.layers.0.mlp.gate_proj.weight' }));

    const lacking = { ...source, tensors: source.tensors.filter((t) => t.name !== 'model.language_model.layers.2.mlp.up_proj.weight') };
    const r2 = await auditSubmission(good, { source: lacking });
    const row = r2.tensors.find((x) => x.name === 'model.language_model.layers.2.mlp.up_proj.weight')!;
    expect(row).toMatchObject({ audited: true, in_source: false, original: 0, codes: 0, scales: 0, floats: 256 * 128 + 256 * 4 });
  });
});

describe('what is served is what is audited', () => {
  const relocate = async (d: string, from: string, to: string): Promise<void> => {
    const m = await readManifest(d);
    for (const s of m.shards) if (s.file === from) s.file = to;
    for (const t of Object.values(m.tensors)) if (t.shard === from) t.shard = to;
    await writeManifest(d, m);
  };

  it('refuses absolute, ../ and symlinked shard names by name, without opening them', async () => {
    const m = await readManifest(good);
    const shard = m.shards[0]!.file;
    for (const [k, name] of ['absolute', 'dotdot', 'symlink'].entries()) {
      const d = await copyOf(`path-${name}`);
      const elsewhere = join(dir, `elsewhere-${k}`);
      await mkdir(elsewhere, { recursive: true });
      await rename(join(d, shard), join(elsewhere, 'x.safetensors'));
      const to = name === 'absolute' ? join(elsewhere, 'x.safetensors') : name === 'dotdot' ? `weights/../../elsewhere-${k}/x.safetensors` : 'weights/link.safetensors';
      if (name === 'symlink') await symlink(join(elsewhere, 'x.safetensors'), join(d, 'weights/link.safetensors'));
      await relocate(d, shard, to);
      const r = await auditSubmission(d, { source });
      expect(r.pass, name).toBe(false);
      expect(r.violations, name).toContainEqual(expect.objectContaining({ reason: 'shard-path-outside-weights', shard: to }));
      // Absolute and ../ names also fail the schema's pattern (no shard is read at all); a symlink is not opened.
      if (name === 'symlink') expect(r.shards.find((s) => s.file === to), name).toMatchObject({ sha256: null, code_bytes_scanned: 0 });
    }
  });

  const scaleOf = 'model.language_model.layers.1.mlp.gate_proj.weight';
  it.each([
    ['NaN', NaN, 'scale-not-finite'],
    ['+Inf', Infinity, 'scale-not-finite'],
    ['negative', -0.5, 'scale-not-positive'],
    ['zero', 0, 'scale-not-positive'],
    ['1e38', 1e38, 'scale-out-of-range'],
  ] as const)('refuses a %s scale even with the manifest hashes rewritten', async (label, value, reason) => {
    const d = await copyOf(`scale-${label}`);
    const t = (await readManifest(d)).tensors[scaleOf]!;
    await rewriteShard(d, t.shard, (entries) => {
      const e = entries.find((x) => x.name === t.scale_key)!;
      const b = Buffer.from(e.data as Buffer);
      b.writeFloatLE(value, 4 * 5);
      e.data = b;
    });
    const r = await auditSubmission(d, { source });
    expect(r.failed_gates).toEqual(['weight-audit']);
    expect(r.violations).toEqual([expect.objectContaining({ reason, tensor: scaleOf, detail: `${t.scale_key} element 5` })]);
  });

  it('refuses a NaN or Inf in a float tensor (a norm weight)', async () => {
    for (const [label, bits] of [['NaN', 0x7fc0], ['-Inf', 0xff80]] as const) {
      const d = await copyOf(`float-${label}`);
      const name = 'model.language_model.norm.weight';
      const t = (await readManifest(d)).tensors[name]!;
      expect(t.dtype).toBe('BF16');
      await rewriteShard(d, t.shard, (entries) => {
        const e = entries.find((x) => x.name === t.data_key)!;
        const b = Buffer.from(e.data as Buffer);
        b.writeUInt16LE(bits, 2 * 3);
        e.data = b;
      });
      const r = await auditSubmission(d, { source });
      expect(r.violations, label).toEqual([expect.objectContaining({ reason: 'float-not-finite', tensor: name, detail: `${name} element 3` })]);
    }
  });

  it("refuses an entry whose keys are another entry's (two same-shaped tensors swapped)", async () => {
    const d = await copyOf('swapped');
    const m = await readManifest(d);
    const a = m.tensors['model.language_model.layers.0.mlp.up_proj.weight']!;
    const b = m.tensors['model.language_model.layers.1.mlp.up_proj.weight']!;
    expect(a.shape).toEqual(b.shape);
    [a.codes_key, b.codes_key] = [b.codes_key, a.codes_key];
    [a.scale_key, b.scale_key] = [b.scale_key, a.scale_key];
    [a.shard, b.shard] = [b.shard, a.shard];
    await writeManifest(d, m);
    const r = await auditSubmission(d, { source });
    expect(r.failed_gates).toEqual(['weight-audit']);
    expect(r.violations.filter((x) => x.reason === 'key-not-own').map((x) => `${x.tensor} ${x.actual}`).sort()).toEqual([
      'model.language_model.layers.0.mlp.up_proj.weight model.language_model.layers.1.mlp.up_proj.weight.codes',
      'model.language_model.layers.0.mlp.up_proj.weight model.language_model.layers.1.mlp.up_proj.weight.scale',
      'model.language_model.layers.1.mlp.up_proj.weight model.language_model.layers.0.mlp.up_proj.weight.codes',
      'model.language_model.layers.1.mlp.up_proj.weight model.language_model.layers.0.mlp.up_proj.weight.scale',
    ]);
  });
});

describe('verify <dir>', () => {
  const run = (...args: string[]) => spawnSync(join(root, 'node_modules/.bin/tsx'), [join(root, 'lib/audit/verify-command.ts'), ...args], { encoding: 'utf8', cwd: root });

  it('passes a good submission against its source and names the failed gate otherwise', async () => {
    const ok = run(good, '--source', sourceDir);
    expect(ok.stdout).toContain('gate weight-audit: 0 violations pass');
    expect(ok.stdout.trim().split('\n').at(-1)).toBe('PASS');
    expect(ok.status).toBe(0);

    const d = await copyOf('verify-removed');
    const m = await readManifest(d);
    delete m.tensors['model.language_model.norm.weight'];
    await writeManifest(d, m);
    const bad = run(d, '--source', sourceDir);
    expect(bad.status).toBe(1);
    expect(bad.stdout).toMatch(/^gate weight-audit failed: .*tensor-not-in-manifest model\.language_model\.norm\.weight/m);
    expect(bad.stdout.trim().split('\n').at(-1)).toBe('FAIL');
  });

  it('a missing directory or an unreadable manifest is said once, first, with no empty gate lines', async () => {
    const missing = run(join(good, 'no-such-dir'));
    expect(missing.status).toBe(2);
    expect(missing.stdout).toBe('');
    expect(missing.stderr.trim().split('\n')).toEqual([`verify: ${join(good, 'no-such-dir')} is not a directory (give the submission directory: the one holding quantization_manifest.json)`]);
    const d = await copyOf('verify-unreadable');
    await writeFile(join(d, 'quantization_manifest.json'), '{"truncated": ');
    const bad = run(d, '--source', sourceDir);
    expect(bad.status).toBe(1);
    const lines = bad.stdout.trim().split('\n');
    expect(lines[1]).toMatch(/^the manifest cannot be read, so no gate can be checked: .*quantization_manifest\.json: .*JSON/);
    expect(lines.at(-1)).toBe('FAIL');
    expect(bad.stdout).not.toMatch(/failed: $/m);
    expect(lines).toHaveLength(3);
  });

  it('prints the specific reason in text, and pipeline.ts verify honours --json', async () => {
    const d = await copyOf('verify-reason');
    const m = await readManifest(d);
    const shard = m.shards[0]!.file;
    const bytes = await readFile(join(d, shard));
    bytes.writeBigUInt64LE(10n ** 7n, 0); // header length past the end of the file (under the 100 MB cap)
    await writeFile(join(d, shard), bytes);
    const text = run(d, '--source', sourceDir);
    expect(text.status).toBe(1);
    expect(text.stdout).toMatch(new RegExp(`shard-invalid ${shard.replace(/[.]/g, '\\.')} \\(.*invalid-header-length`));
    const viaPipeline = spawnSync(join(root, 'node_modules/.bin/tsx'), [join(root, 'pipeline.ts'), 'verify', d, '--source', sourceDir, '--json'], { encoding: 'utf8', cwd: root });
    expect(viaPipeline.status, viaPipeline.stderr).toBe(1);
    const report = JSON.parse(viaPipeline.stdout) as { pass: boolean; violations: Array<{ reason: string; detail?: string }> };
    expect(report.pass).toBe(false);
    expect(report.violations).toContainEqual(expect.objectContaining({ reason: 'shard-invalid', detail: expect.stringContaining('invalid-header-length') }));
  });

  it('without a source, checks manifest and bytes and says coverage was skipped', async () => {
    const r = run(good);
    expect(r.stdout).toContain('source-coverage check skipped');
    expect(r.status).toBe(0);
    const d = await copyOf('verify-arch');
    await writeFile(join(d, 'architecture.json'), JSON.stringify({ source_tensors: Object.fromEntries(source.tensors.map((t) => [t.name, { shape: t.shape, dtype: t.dtype }])) }));
    const m = await readManifest(d);
    delete m.tensors['model.language_model.norm.weight'];
    await writeManifest(d, m);
    const r2 = run(d);
    expect(r2.stdout).toContain('(55 text-model tensors)');
    expect(r2.status).toBe(1);
  });
});

describe('the shard scanner', () => {
  it('finds the first code 3 of each range, in SIMD blocks, across chunk boundaries and in tails', async () => {
    const { ShardScanner } = await import('../lib/audit/scan.ts');
    const { createHash } = await import('node:crypto');
    const d = await mkdtemp(join(tmpdir(), 'tf-scan-'));
    const scanner = new ShardScanner();
    try {
      const size = 9 * 2 ** 20 + 77; // 37 reads of 256 KiB, the last partial
      const bytes = Buffer.alloc(size, 0b10_01_00_10); // valid codes everywhere
      const ranges = [
        { tensor: 'a', begin: 5, end: 4 * 2 ** 20 + 1000 }, // crosses the first chunk boundary
        { tensor: 'b', begin: 4 * 2 ** 20 + 1000, end: 8 * 2 ** 20 + 3 }, // crosses the second
        { tensor: 'c', begin: 8 * 2 ** 20 + 3, end: size - 2 }, // ends in a tail shorter than a SIMD block
      ];
      const path = join(d, 'shard.bin');
      await writeFile(path, bytes);
      const clean = await scanner.scan(path, ranges);
      expect(clean).toMatchObject({ size, invalid: [], sha256: createHash('sha256').update(bytes).digest('hex') });
      // One bad byte in a's second chunk part, two in b (the first one wins), one in c's last bytes.
      const bad: Array<[number, number]> = [[4 * 2 ** 20 + 7, 0b11_00_00_00], [4 * 2 ** 20 + 1000 + 64 * 1000 + 9, 0b00_00_11_00], [8 * 2 ** 20 - 1, 0b11], [size - 3, 0b00_11_00_00]];
      for (const [at, v] of bad) bytes[at] = v;
      await writeFile(path, bytes);
      const found = await scanner.scan(path, ranges);
      expect(found.invalid).toEqual([
        { tensor: 'a', byte: 4 * 2 ** 20 + 7 - 5, value: 0b11_00_00_00 },
        { tensor: 'b', byte: 64 * 1000 + 9, value: 0b00_00_11_00 },
        { tensor: 'c', byte: size - 3 - (8 * 2 ** 20 + 3), value: 0b00_11_00_00 },
      ]);
      // A byte outside every range is not a code: 0xff there is fine.
      bytes.fill(0b10_01_00_10, 0, size);
      bytes[2] = 0xff;
      await writeFile(path, bytes);
      expect((await scanner.scan(path, ranges)).invalid).toEqual([]);
    } finally {
      await scanner.close();
      await rm(d, { recursive: true, force: true });
    }
  });
});
