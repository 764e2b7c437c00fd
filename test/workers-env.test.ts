/**
 * The workers' environments, one per device kind: python/requirements.txt (CPU) and
 * python/requirements-cuda.txt, locked with hashes in python/requirements-cuda.lock.txt (scripts/lock-workers.ts).
 * The CUDA set is the CPU set with torch and numpy swapped and the Gated DeltaNet kernels and vLLM added; its lock resolves for
 * the serving box's CPython 3.12 manylinux_2_31 x86_64 (resolution only, online) and carries CUDA 12.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, test } from 'vitest';
import { DEFAULT_REQUIREMENTS, venvDir } from '../engine/venv.ts';
import { cudaOf } from '../lib/submission/cuda.ts';
import { exec } from '../lib/submission/exec.ts';
import { normalizeName, parseCompiled, toolEnv, uvCompileArgs, type LockedPin } from '../lib/submission/wheels.ts';
import { CUDA_LOCK, CUDA_OVERRIDES, CUDA_REQUIREMENTS } from '../scripts/lock-workers.ts';

const root = join(import.meta.dirname, '..');
const uv = join(root, '.ternforge', 'venv', 'bin', 'uv');

function pinsOf(file: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const raw of readFileSync(join(root, file), 'utf8').split('\n')) {
    const line = raw.replace(/#.*/, '').trim();
    if (line === '') continue;
    const [name, version] = line.split('==') as [string, string];
    out.set(normalizeName(name), version);
  }
  return out;
}

const cpu = pinsOf(DEFAULT_REQUIREMENTS);
const cuda = pinsOf(CUDA_REQUIREMENTS);
const lock = parseCompiled(readFileSync(join(root, CUDA_LOCK), 'utf8'));
const locked = (name: string): string | undefined => lock.find((p) => p.name === name)?.version;
/** The lock is universal: a distribution may be pinned twice, at versions split by a marker (networkx by Python). */
const lockedVersions = (name: string): string[] => lock.filter((p) => p.name === name).map((p) => p.version);

test('the CUDA set is the CPU set with the serving CUDA set\'s torch and numpy, the linear-attention kernels and vLLM added', () => {
  const differs = [...cpu].filter(([n, v]) => cuda.get(n) !== v).map(([n]) => n);
  expect(differs).toEqual(['torch', 'numpy']);
  // vLLM writes the teacher's transcripts (kd.chat_engine auto): the same vllm, torch and numpy as the server's
  const serving = pinsOf('python/requirements-serve-cuda.txt');
  for (const n of ['vllm', 'torch', 'numpy']) expect(`${n}==${cuda.get(n)}`).toBe(`${n}==${serving.get(n)}`);
  expect(cuda.get('torch')).toBe('2.10.0');
  expect([...cuda.keys()].filter((n) => !cpu.has(n)).sort()).toEqual(['einops', 'fla-core', 'flash-linear-attention', 'vllm']);
  expect(cuda.has('causal-conv1d')).toBe(false); // a source distribution: see the file's comment
});

test('the lock pins every requirement at its version, each with sha256 hashes, and carries CUDA 12 (driver >= 525.60.13)', () => {
  for (const [name, version] of cuda) expect(`${name}==${locked(name)}`).toBe(`${name}==${version}`);
  expect(lock.filter((p) => p.hashes.length === 0)).toEqual([]);
  expect(cudaOf(lock)).toMatchObject({ runtime_package: 'nvidia-cuda-runtime-cu12', major: 12, minor: 8, torch: '2.10.0', min_driver: '525.60.13' });
  expect(lock.filter((p) => /cu13$/.test(p.name))).toEqual([]);
  expect(locked('triton')).toBe('3.6.0');
  // lm-eval's two source-only dependencies, dropped by python/requirements-cuda.overrides.txt (each with its reason)
  expect([locked('sqlitedict'), locked('word2number'), locked('lm-eval'), locked('math-verify')]).toEqual([undefined, undefined, '0.4.13', '0.9.0']);
});

test('the qwen3.5-4b profile installs the CUDA lock, into its own venv; the small profiles keep the CPU set', () => {
  const section = (p: string): { requirements?: string } => JSON.parse(readFileSync(join(root, 'profiles', `${p}.json`), 'utf8')).stages['python-env'];
  expect(section('qwen3.5-4b').requirements).toBe(CUDA_LOCK);
  for (const p of ['tiny', 'smol', 'rehearsal']) expect(section(p).requirements ?? DEFAULT_REQUIREMENTS).toBe(DEFAULT_REQUIREMENTS);
  const saved = process.env.TERNFORGE_VENV;
  delete process.env.TERNFORGE_VENV;
  try {
    expect(venvDir('/w')).toBe('/w/.ternforge/venv');
    expect(venvDir('/w', CUDA_LOCK)).toBe('/w/.ternforge/venv-cuda');
    expect(venvDir('/w', 'python/requirements-cuda.txt')).toBe('/w/.ternforge/venv-cuda');
    expect(venvDir('/w', 'requirements.lock.txt')).toBe('/w/.ternforge/venv-custom');
  } finally {
    if (saved !== undefined) process.env.TERNFORGE_VENV = saved;
  }
});

describe('the CUDA workers set for the serving box (resolution only)', () => {
  let pins: LockedPin[];
  beforeAll(async () => {
    // The lock as constraints: this platform's resolution must take exactly the locked versions.
    const args = uvCompileArgs(join(root, CUDA_REQUIREMENTS), { pythonVersion: '3.12', platform: 'x86_64-manylinux_2_31' }, ['-c', join(root, CUDA_LOCK), '--overrides', join(root, CUDA_OVERRIDES)]);
    const r = await exec(uv, args, { env: { ...toolEnv(), UV_PYTHON_DOWNLOADS: 'never' } });
    if (r.code !== 0) throw new Error(`the CUDA workers set does not resolve for CPython 3.12 manylinux_2_31 x86_64:\n${r.stderr}`);
    pins = parseCompiled(r.stdout);
  }, 300_000);

  test('resolves for CPython 3.12 manylinux_2_31 x86_64 to the locked versions, CUDA 12', () => {
    expect(pins.filter((p) => !lockedVersions(p.name).includes(p.version)).map((p) => `${p.name}==${p.version} (lock: ${lockedVersions(p.name).join(', ') || 'absent'})`)).toEqual([]);
    expect(cudaOf(pins)?.major).toBe(12);
    expect(pins.find((p) => p.name === 'flash-linear-attention')?.version).toBe('0.6.0');
    expect([pins.find((p) => p.name === 'vllm')?.version, pins.find((p) => p.name === 'numba')?.version]).toEqual(['0.19.1', '0.61.2']);
    expect(pins.length).toBeGreaterThan(60);
  });
});
