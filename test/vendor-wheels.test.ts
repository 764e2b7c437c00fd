/**
 * vendor-wheels: the real stage on tiny (CPython 3.11, manylinux_2_28 x86_64, torch 2.13.0+cpu) in a
 * temp workdir, with the shared wheel cache ($TERNFORGE_WHEEL_CACHE or ~/.cache/ternforge/wheels).
 * Then the offline-install proof against a wheels/ with one wheel removed: each check fails and names it.
 * And the qwen3.5-4b set, resolution only (no multi-GB download): it resolves for CPython 3.12 manylinux,
 * carries vLLM and a CUDA 12 torch, and the CUDA record names the driver it needs.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { SchemaSet } from '../engine/json-io.ts';
import { checkInstaller, checkRecord, checkResolver, proveOfflineInstall } from '../lib/submission/wheel-proof.ts';
import { linkOrCopy } from '../engine/files.ts';
import { resolveLock, sha256File, type LockedPin, type WheelTarget } from '../lib/submission/wheels.ts';
import { cudaOf } from '../lib/submission/cuda.ts';
import type { VendorWheelsParams } from '../schemas/generated/vendor-wheels.ts';
import type { WheelsRecord } from '../schemas/generated/wheels-record.ts';

const root = join(import.meta.dirname, '..');
const venv = process.env.TERNFORGE_VENV || join(root, '.ternforge', 'venv');
const python = join(venv, 'bin', 'python');
const uv = join(venv, 'bin', 'uv');
const target: WheelTarget = { pythonVersion: '3.11', platform: 'x86_64-manylinux_2_28' };
let workdir: string;
let out: string;
let record: WheelsRecord;
let cli: { stdout: string; stderr: string };

/** A hard-link copy of the vendored wheels/ without the wheels of `drop`; returns the dir. */
function wheelsWithout(drop: string): string {
  const dir = join(workdir, `wheels-without-${drop}`);
  mkdirSync(dir);
  for (const f of readdirSync(join(out, 'wheels'))) if (!f.startsWith(`${drop}-`)) linkOrCopy(join(out, 'wheels', f), join(dir, f));
  return dir;
}

describe('vendor-wheels on tiny', () => {
  beforeAll(() => {
    workdir = mkdtempSync(join(tmpdir(), 'ternforge-wheels-test-'));
    const r = spawnSync(process.execPath, ['--import', 'tsx', join(root, 'pipeline.ts'), 'vendor-wheels', '--profile', 'tiny', '--workdir', workdir], { cwd: root, encoding: 'utf8', env: { ...process.env, TERNFORGE_VENV: venv }, timeout: 580_000 });
    if (r.status !== 0) throw new Error(`vendor-wheels failed (${r.status}):\n${r.stdout}\n${r.stderr}`);
    cli = r;
    out = join(workdir, '.ternforge', 'tiny', 'vendor-wheels', 'outputs');
    record = JSON.parse(readFileSync(join(out, 'wheels.json'), 'utf8')) as WheelsRecord;
  }, 600_000);
  afterAll(() => rmSync(workdir, { recursive: true, force: true }));

  test('wheels.json passes its schema, lists every file in wheels/ with its sha256 and size', async () => {
    expect(new SchemaSet(join(root, 'schemas')).validate('wheels-record.schema.json', record)).toEqual([]);
    expect(record.target).toEqual({ python_version: '3.11', platform: 'x86_64-manylinux_2_28', implementation: 'cp', abi: 'cp311' });
    expect(record.cuda).toBeNull(); // the CPU stack
    expect(readdirSync(join(out, 'wheels')).sort()).toEqual(record.wheels.map((w) => w.filename).sort());
    for (const w of record.wheels) {
      expect(await sha256File(join(out, 'wheels', w.filename))).toBe(w.sha256);
      expect(statSync(join(out, 'wheels', w.filename)).size).toBe(w.size);
    }
    expect(record.proof).toEqual({ passed: true, checks: [{ check: 'record', status: 'passed' }, { check: 'resolver', status: 'passed' }, { check: 'installer', status: 'passed' }] });
  });

  test('the lock pins every wheel exactly, torch as the CPU build, nothing else', () => {
    const lock = readFileSync(join(out, 'requirements-serve.lock.txt'), 'utf8');
    const pins = lock.split('\n').filter((l) => l !== '' && !l.startsWith('#')).map((l) => l.split(' ')[0]).sort();
    expect(pins).toEqual(record.wheels.map((w) => `${w.name}==${w.version}`).sort());
    expect(pins).toContain('torch==2.13.0+cpu');
    expect(record.requirements.overrides).toEqual(['torch==2.13.0 -> torch==2.13.0+cpu']);
    // every top-level serving requirement is in the closure at its pinned version
    const top = readFileSync(join(root, 'python', 'requirements-serve.txt'), 'utf8').split('\n').map((l) => l.replace(/#.*/, '').trim()).filter(Boolean);
    for (const req of top) {
      const [name, version] = req.split('==') as [string, string];
      expect(pins).toContain(`${name.toLowerCase().replace(/[-_.]+/g, '-')}==${name === 'torch' ? '2.13.0+cpu' : version}`);
    }
  });

  test('wheels are hard links into the shared cache', () => {
    const torch = record.wheels.find((w) => w.name === 'torch')!;
    expect(statSync(join(out, 'wheels', torch.filename)).nlink).toBeGreaterThanOrEqual(2);
    expect(cli.stdout + cli.stderr).toMatch(/cache .*: \d+ hit\(s\), \d+ downloaded/);
  });

  test('a removed wheel fails every check of the offline-install proof, naming it', async () => {
    const dir = wheelsWithout('uvicorn');
    const input = join(workdir, 'requirements.in');
    writeFileSync(input, record.requirements.lines.join('\n') + '\n');
    const lock = join(out, 'requirements-serve.lock.txt');

    const rec = await checkRecord(dir, record.wheels);
    expect(rec).toMatchObject({ check: 'record', status: 'failed', missing: ['uvicorn==0.55.0'] });
    const res = await checkResolver({ uv, requirementsIn: input, wheelsDir: dir, target, wheels: record.wheels });
    expect(res.status).toBe('failed');
    expect(res.missing).toEqual(['uvicorn==0.55.0']);
    const inst = await checkInstaller({ python, lock, wheelsDir: dir, target });
    expect(inst.status).toBe('failed');
    expect(inst.missing).toEqual(['uvicorn==0.55.0']);
    const all = await proveOfflineInstall({ uv, python, requirementsIn: input, lock, wheelsDir: dir, target, wheels: record.wheels });
    expect(all.passed).toBe(false);
  });

  test('a removed dependency (not a top-level pin) is named too', async () => {
    const dir = wheelsWithout('sympy');
    const inst = await checkInstaller({ python, lock: join(out, 'requirements-serve.lock.txt'), wheelsDir: dir, target });
    expect(inst.missing).toEqual(['sympy==1.14.0']);
  });

  test('a stray file in wheels/ fails the record check', async () => {
    const dir = wheelsWithout('nothing');
    writeFileSync(join(dir, 'extra-1.0-py3-none-any.whl'), 'x');
    expect(await checkRecord(dir, record.wheels)).toMatchObject({ status: 'failed', detail: 'extra-1.0-py3-none-any.whl: in wheels/ but not in the lock' });
  });

  test('a requirement with no wheel for the target is refused, naming it', async () => {
    const input = join(workdir, 'impossible.in');
    writeFileSync(input, 'uvicorn==0.0.999\n');
    const r = await resolveLock({ uv, input, target, findLinks: [] });
    expect(r.ok).toBe(false);
    if (!r.ok) {
      expect(r.error.reason).toBe('requirements-unresolvable');
      expect(r.error.reason === 'requirements-unresolvable' && r.error.requirements).toEqual(['uvicorn==0.0.999']);
    }
  });
});

describe('the qwen3.5-4b wheel set (resolution only)', () => {
  const profile = JSON.parse(readFileSync(join(root, 'profiles', 'qwen3.5-4b.json'), 'utf8')) as { stages: { 'vendor-wheels': VendorWheelsParams } };
  const params = profile.stages['vendor-wheels'];
  const cudaTarget: WheelTarget = { pythonVersion: params.python_version, platform: params.platform };
  let pins: LockedPin[];
  const pin = (name: string): string | undefined => pins.find((p) => p.name === name)?.version;

  beforeAll(async () => {
    const r = await resolveLock({ uv, input: join(root, params.requirements!), target: cudaTarget, findLinks: [] });
    if (!r.ok) throw new Error(`the qwen3.5-4b set does not resolve: ${JSON.stringify(r.error)}`);
    pins = r.value;
  }, 300_000);

  test('the profile resolves python/requirements-serve-cuda.txt for CPython 3.12 manylinux_2_31 and wants CUDA 12', () => {
    expect(params).toMatchObject({ requirements: 'python/requirements-serve-cuda.txt', python_version: '3.12', platform: 'x86_64-manylinux_2_31', cuda_major: 12 });
  });

  test('it contains vLLM, torch 2.10.0 with CUDA 12 libraries (no CUDA 13 wheel), uv, and every top-level pin', () => {
    expect(pin('vllm')).toBe('0.19.1');
    expect(pin('torch')).toBe('2.10.0');
    expect(pin('transformers')).toBe('5.24.0');
    expect(pin('uv')).toBe('0.13.9');
    expect(pin('nvidia-cuda-runtime-cu12')).toMatch(/^12\.8\./);
    expect(pins.filter((p) => p.name.startsWith('nvidia-') && p.name.endsWith('-cu12')).length).toBeGreaterThanOrEqual(10);
    expect(pins.filter((p) => /cu13$/.test(p.name) || (p.name.startsWith('nvidia-cuda-runtime') && p.version.startsWith('13.')))).toEqual([]);
    const top = readFileSync(join(root, params.requirements!), 'utf8').split('\n').map((l) => l.replace(/#.*/, '').trim()).filter(Boolean);
    for (const req of top) {
      const [name, version] = req.split('==') as [string, string];
      expect(`${name}==${pin(name.toLowerCase().replace(/[-_.]+/g, '-'))}`).toBe(`${name}==${version}`);
    }
    expect(pins.length).toBeGreaterThan(150);
  });

  test('its CUDA record: runtime 12.8, any driver from 525.60.13 (CUDA 12 minor-version compatibility)', () => {
    expect(cudaOf(pins)).toMatchObject({ runtime_package: 'nvidia-cuda-runtime-cu12', major: 12, minor: 8, torch: '2.10.0', min_driver: '525.60.13', toolkit_driver: '570.26' });
  });

  test('vLLM 0.19.1 has no wheel for manylinux_2_28: the resolver refuses, naming vllm', async () => {
    const r = await resolveLock({ uv, input: join(root, params.requirements!), target: { ...cudaTarget, platform: 'x86_64-manylinux_2_28' }, findLinks: [] });
    expect(r.ok).toBe(false);
    if (!r.ok) {
      expect(r.error.reason).toBe('requirements-unresolvable');
      expect(r.error.reason === 'requirements-unresolvable' && r.error.detail).toMatch(/vllm/);
    }
  }, 120_000);
});

describe('cudaOf', () => {
  test('a CPU set carries none; a CUDA 13 set needs a driver from 580.65.06; an unknown major is refused', () => {
    expect(cudaOf([{ name: 'torch', version: '2.13.0+cpu' }])).toBeNull();
    expect(cudaOf([{ name: 'torch', version: '2.13.0' }, { name: 'nvidia-cuda-runtime', version: '13.0.96' }])).toMatchObject({ major: 13, min_driver: '580.65.06', toolkit_driver: '580.65.06' });
    expect(() => cudaOf([{ name: 'nvidia-cuda-runtime-cu14', version: '14.0.1' }])).toThrow(/no minimum driver known for CUDA 14/);
    expect(() => cudaOf([{ name: 'nvidia-cuda-runtime-cu12', version: '13.0.1' }])).toThrow(/not the package's cu12/);
  });
});
