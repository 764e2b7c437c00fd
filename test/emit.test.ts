/**
 * emit: the real pipeline on tiny, in a temp workdir. The emitted directory holds exactly the contract's
 * files and nothing else; upstream files are hard links, not copies; architecture.json passes its
 * schema and says what the tiny checkpoint is;
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { SchemaSet } from '../engine/json-io.ts';
import { listFiles } from '../engine/files.ts';
import type { Architecture } from '../schemas/generated/architecture.ts';
import type { WheelsRecord } from '../schemas/generated/wheels-record.ts';

const root = join(import.meta.dirname, '..');
const venv = process.env.TERNFORGE_VENV || join(root, '.ternforge', 'venv');
const schemas = new SchemaSet(join(root, 'schemas'));
let workdir: string;
let out: string;
const stageOut = (s: string): string => join(workdir, '.ternforge', 'tiny', s, 'outputs');

/** $TERNFORGE_EMIT_TEST_WORKDIR: check a workdir where emit already ran instead of building one (quick reruns). */
const given = process.env.TERNFORGE_EMIT_TEST_WORKDIR;

beforeAll(() => {
  workdir = given ?? mkdtempSync(join(tmpdir(), 'ternforge-emit-test-'));
  out = stageOut('emit');
  if (given !== undefined) return;
  const cli = spawnSync(process.execPath, ['--import', 'tsx', join(root, 'pipeline.ts'), 'emit', '--profile', 'tiny', '--workdir', workdir], { cwd: root, encoding: 'utf8', env: { ...process.env, TERNFORGE_VENV: venv }, timeout: 580_000 });
  if (cli.status !== 0) throw new Error(`emit failed (${cli.status}):\n${cli.stdout}\n${cli.stderr}`);
}, 600_000);
afterAll(() => {
  if (given === undefined) rmSync(workdir, { recursive: true, force: true });
});

describe('emit on tiny', () => {
  test('the emitted directory holds exactly the contract files', () => {
    const wheels = (JSON.parse(readFileSync(join(out, 'evidence', 'wheels.json'), 'utf8')) as WheelsRecord).wheels.map((w) => `wheels/${w.filename}`);
    expect(wheels.length).toBeGreaterThan(20);
    expect(wheels).toContain('wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl');
    const server = listFiles(join(root, 'python', 'ternforge_server')).filter((f) => !f.includes('__pycache__') && !f.endsWith('.pyc')).map((f) => `server/ternforge_server/${f}`);
    expect(server).toContain('server/ternforge_server/__main__.py');
    expect(listFiles(out)).toEqual(
      [
        'architecture.json',
        'chat_template.jinja',
        'config.json',
        'evidence/audit.json',
        'evidence/source.json',
        'evidence/startup-budget.json',
        'evidence/startup-budget.md',
        'evidence/wheels.json',
        'generation_config.json',
        'quantization_manifest.json',
        'requirements-serve.txt',
        'serve.sh',
        'tokenizer.json',
        'tokenizer_config.json',
        'weights/model-00001-of-00001.safetensors',
        'server/ternforge_server/contract.json',
        ...server,
        ...wheels,
      ].sort(),
    );
    // The served box has only Python: the server reads the contract shipped beside it, byte for byte the repository's.
    expect(readFileSync(join(out, 'server/ternforge_server/contract.json'), 'utf8')).toBe(readFileSync(join(root, 'schemas', 'contract.json'), 'utf8'));
  });

  test('no float weights of the source, no caches', () => {
    const files = listFiles(out);
    expect(files.filter((f) => f.endsWith('.safetensors'))).toEqual(['weights/model-00001-of-00001.safetensors']);
    expect(files.filter((f) => f.includes('index.json') || f.includes('__pycache__') || f.endsWith('.pyc'))).toEqual([]);
  });

  test('upstream files are hard links into the upstream outputs; repository files are copies', () => {
    const ino = (p: string): number => statSync(p).ino;
    expect(ino(join(out, 'weights/model-00001-of-00001.safetensors'))).toBe(ino(join(stageOut('pack'), 'weights/model-00001-of-00001.safetensors')));
    expect(ino(join(out, 'config.json'))).toBe(ino(join(stageOut('fetch-model'), 'model', 'config.json')));
    expect(ino(join(out, 'requirements-serve.txt'))).toBe(ino(join(stageOut('vendor-wheels'), 'requirements-serve.lock.txt')));
    expect(ino(join(out, 'evidence/audit.json'))).toBe(ino(join(stageOut('audit'), 'audit.json')));
    const torch = 'wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl';
    expect(ino(join(out, torch))).toBe(ino(join(stageOut('vendor-wheels'), torch)));
    expect(ino(join(out, 'serve.sh'))).not.toBe(ino(join(root, 'serve', 'serve.sh')));
    expect(readFileSync(join(out, 'serve.sh'), 'utf8')).toBe(readFileSync(join(root, 'serve', 'serve.sh'), 'utf8'));
    expect(statSync(join(out, 'serve.sh')).mode & 0o111).toBe(0o111);
  });

  test('architecture.json passes its schema and summarises the tiny checkpoint', () => {
    const arch = JSON.parse(readFileSync(join(out, 'architecture.json'), 'utf8')) as Architecture;
    expect(schemas.validate('architecture.schema.json', arch)).toEqual([]);
    const config = JSON.parse(readFileSync(join(out, 'config.json'), 'utf8')) as { text_config: { num_hidden_layers: number; hidden_size: number; vocab_size: number; layer_types: string[] } };
    const manifest = JSON.parse(readFileSync(join(out, 'quantization_manifest.json'), 'utf8')) as { base_model: string; revision: string; tensors: Record<string, { encoding: string }> };
    expect(arch.base_model).toEqual({ id: manifest.base_model, revision: manifest.revision });
    expect(arch.model.model_type).toBe('qwen3_5');
    expect(arch.model.text.num_hidden_layers).toBe(config.text_config.num_hidden_layers);
    expect(arch.model.text.hidden_size).toBe(config.text_config.hidden_size);
    expect(arch.model.text.vocab_size).toBe(config.text_config.vocab_size);
    expect(arch.model.text.layer_types).toEqual(config.text_config.layer_types);
    expect(arch.model.text.layer_type_counts).toEqual({ linear_attention: 3, full_attention: 1 });
    expect(arch.model.text.tie_word_embeddings).toBe(true);
    expect(arch.model.vision_tower).toBe(true);
    expect(arch.model.mtp_layers).toBe(1);
    expect(arch.packing.group_sizes).toEqual([32]);
    expect(arch.tensors.total).toBe(Object.keys(manifest.tensors).length);
    expect(arch.tensors.packed_2bit + arch.tensors.float).toBe(arch.tensors.total);
    expect(arch.files.weights.map((w) => w.file)).toEqual(['weights/model-00001-of-00001.safetensors']);
    expect(arch.evidence).toEqual({ audit: 'evidence/audit.json', source: 'evidence/source.json', wheels: 'evidence/wheels.json' });
    for (const ref of [arch.files.config, arch.files.manifest, ...arch.files.tokenizer]) expect(statSync(join(out, ref.file)).size).toBe(ref.size);
  });


  test('architecture.json records the source tensor list, so verify of the emitted directory checks coverage', () => {
    const arch = JSON.parse(readFileSync(join(out, 'architecture.json'), 'utf8')) as Architecture;
    const manifest = JSON.parse(readFileSync(join(out, 'quantization_manifest.json'), 'utf8')) as { tensors: Record<string, { shape: number[] }> };
    expect(Object.keys(arch.source_tensors ?? {}).length).toBeGreaterThan(0);
    for (const [name, t] of Object.entries(manifest.tensors)) if (arch.source_tensors?.[name] !== undefined) expect(arch.source_tensors[name]!.shape, name).toEqual(t.shape);
    const r = spawnSync(process.execPath, ['--import', 'tsx', join(root, 'pipeline.ts'), 'verify', out], { cwd: root, encoding: 'utf8' });
    expect(r.stdout).not.toContain('skipped');
    expect(r.stdout).toMatch(/^source: .*architecture\.json \(\d+ text-model tensors\)$/m);
    expect(r.stdout.trim().split('\n').at(-1)).toBe('PASS');
    expect(r.status).toBe(0);
  });
});
