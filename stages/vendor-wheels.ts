/**
 * vendor-wheels: every Python wheel serve.sh installs offline, for the target platform.
 *
 * Resolves the pinned serving requirements (overrides applied) with uv for the profile's CPython
 * version and manylinux platform, downloads each locked wheel once into a shared cache
 * ($TERNFORGE_WHEEL_CACHE, default ~/.cache/ternforge/wheels; hard-linked from there), and succeeds only
 * after proving that an offline install from `wheels/` alone resolves every requirement.
 *
 * With `cuda_major` set it refuses, before downloading, a resolution whose CUDA runtime (torch's
 * nvidia-cuda-runtime wheel) is of another major version or absent; wheels.json records the runtime and
 * the oldest driver that runs it (lib/submission/cuda.ts).
 *
 * With `python_headers` set it also vendors the target CPython's headers (lib/submission/python-headers.ts)
 * into `toolchain/`: with the ziglang wheel of the requirements, the C toolchain Triton needs on a box
 * without gcc or python3.X-dev.
 *
 * Outputs: `wheels/*.whl`, `requirements-serve.lock.txt` (one exact pin per wheel with its sha256),
 * `wheels.json` (schemas/wheels-record.schema.json), and `toolchain/` when python_headers is set.
 */
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { prettyJson, sha256 } from '../engine/digest.ts';
import { ok } from '../engine/result.ts';
import { defineStage } from '../engine/types.ts';
import { stageFailed } from '../lib/failures.ts';
import { cudaOf, type CudaRecord } from '../lib/submission/cuda.ts';
import { exec } from '../lib/submission/exec.ts';
import { LOCK_WITH_HASHES, WHEELS_LOCK, WHEELS_RECORD } from '../lib/submission/layout.ts';
import { pythonMinor, proveOfflineInstall } from '../lib/submission/wheel-proof.ts';
import { vendorPythonHeaders, type ToolchainRecord } from '../lib/submission/python-headers.ts';
import { abiTag, applyOverrides, ensureCached, lockText, resolveLock, vendorInto, wheelCacheDir, type WheelTarget } from '../lib/submission/wheels.ts';
import type { VendorWheelsParams } from '../schemas/generated/vendor-wheels.ts';
import type { WheelsRecord } from '../schemas/generated/wheels-record.ts';

const DEFAULT_REQUIREMENTS = 'python/requirements-serve.txt';

function requirementsPath(p: VendorWheelsParams): string {
  return p.requirements ?? DEFAULT_REQUIREMENTS;
}

/** uv beside the workers' Python (pinned in python/requirements.txt), else on PATH. */
function uvBeside(python: string): string {
  const beside = join(dirname(python), 'uv');
  return existsSync(beside) ? beside : 'uv';
}

export const stage = defineStage<VendorWheelsParams>({
  name: 'vendor-wheels',
  summary: 'Resolve the serving requirements for the target platform, download the wheels, prove an offline install',
  code: ['stages/vendor-wheels.ts', 'lib/submission/python-headers.ts', 'lib/submission/cuda.ts', 'lib/submission/wheels.ts', 'lib/submission/wheel-proof.ts', 'lib/submission/exec.ts', 'lib/submission/layout.ts'],
  schema: 'schemas/stages/vendor-wheels.schema.json',
  inputs: (p) => [requirementsPath(p), ...(p.python_headers !== undefined ? [p.python_headers] : [])],
  tools: ['node', 'python'],
  network: true,
  async run(ctx) {
    const p = ctx.params;
    const target: WheelTarget = { pythonVersion: p.python_version, platform: p.platform };
    const findLinks = p.find_links ?? [];
    const src = resolve(ctx.root, requirementsPath(p));
    const srcText = readFileSync(src, 'utf8');
    const { lines, replaced } = applyOverrides(srcText, p.overrides ?? []);
    for (const r of replaced) ctx.log(`override: ${r}`);
    // The resolver's input lives in the outputs' scratch name only while the stage runs.
    const requirementsIn = join(ctx.out, '.requirements.in');
    writeFileSync(requirementsIn, lines.join('\n') + '\n');
    const uv = uvBeside(ctx.python);
    const uvVersion = (await exec(uv, ['--version'])).stdout.trim().replace(/^uv\s+/, '').split(' ')[0] ?? 'unknown';
    const sig = { signal: ctx.signal };
    const index = p.index_url !== undefined ? { indexUrl: p.index_url } : {};

    ctx.log(`resolving ${lines.length} requirement(s) for CPython ${target.pythonVersion} ${target.platform} with uv ${uvVersion}`);
    const t0 = performance.now();
    const resolved = await resolveLock({ uv, input: requirementsIn, target, findLinks, ...index, ...sig });
    if (!resolved.ok) return stageFailed(ctx.stage, resolved.error);
    const pins = resolved.value;
    const tResolve = performance.now() - t0;
    ctx.log(`resolved ${pins.length} distributions in ${(tResolve / 1000).toFixed(1)} s`);
    let cuda: CudaRecord | null;
    try {
      cuda = cudaOf(pins);
    } catch (e) {
      return stageFailed(ctx.stage, { reason: 'cuda-unknown', detail: (e as Error).message });
    }
    if (p.cuda_major !== undefined && cuda?.major !== p.cuda_major) {
      const torch = pins.find((x) => x.name === 'torch');
      return stageFailed(ctx.stage, { reason: 'cuda-mismatch', wanted: p.cuda_major, torch: torch?.version ?? null, cuda });
    }
    ctx.log(cuda === null ? 'no CUDA runtime in the set (CPU stack)' : `CUDA runtime ${cuda.runtime} (${cuda.runtime_package}, torch ${cuda.torch ?? 'absent'}): driver >= ${cuda.min_driver}`);

    const cacheDir = wheelCacheDir();
    const cached = await ensureCached({ python: ctx.python, cacheDir, pins, target, findLinks, ...index, ...sig, log: (l) => ctx.log(l) });
    if (!cached.ok) return stageFailed(ctx.stage, cached.error);
    // Named by its variable when set there: the evidence holds no path of this machine (~ is scrubbed).
    const cacheName = process.env.TERNFORGE_WHEEL_CACHE ? '$TERNFORGE_WHEEL_CACHE' : cacheDir;
    ctx.log(`cache ${cacheName}: ${cached.value.hits} hit(s), ${cached.value.downloaded} downloaded`);

    const wheelsDir = join(ctx.out, 'wheels');
    const vendored = await vendorInto(wheelsDir, pins, cached.value.files);
    if (!vendored.ok) return stageFailed(ctx.stage, vendored.error);
    const { wheels } = vendored.value;
    const lockPath = join(ctx.out, WHEELS_LOCK);
    const lock = lockText(wheels, [
      `Locked by ternforge vendor-wheels for CPython ${target.pythonVersion} ${target.platform} (uv ${uvVersion}).`,
      `Install offline: uv pip install --offline --no-index --find-links wheels --require-hashes --target .packages -r requirements-serve.txt (serve.sh)`,
      `sha256 of every wheel: evidence/wheels.json`,
    ], LOCK_WITH_HASHES);
    writeFileSync(lockPath, lock);

    // The proof: the installer check runs pip with an interpreter of the target's version.
    const candidates = [p.proof_python, ctx.python, `python${target.pythonVersion}`].filter((c): c is string => c !== undefined);
    let proofPython: string | null = null;
    for (const c of candidates) {
      if ((await pythonMinor(c)) === target.pythonVersion) {
        proofPython = c;
        break;
      }
    }
    const proof = await proveOfflineInstall({ uv, python: proofPython, requirementsIn, lock: lockPath, wheelsDir, target, wheels, ...sig });
    for (const c of proof.checks) ctx.log(`proof ${c.check}: ${c.status}${c.detail !== undefined && c.status !== 'passed' ? `: ${c.detail}` : ''}`);
    if (!proof.passed) {
      const failed = proof.checks.filter((c) => c.status === 'failed');
      const missing = [...new Set(failed.flatMap((c) => c.missing ?? []))];
      return stageFailed(ctx.stage, { reason: 'offline-install-unproven', missing, checks: Object.fromEntries(failed.map((c) => [c.check, c.detail ?? ''])) });
    }

    let toolchain: ToolchainRecord | null = null;
    if (p.python_headers !== undefined) {
      if (!pins.some((x) => x.name === 'ziglang')) ctx.log('WARNING: python_headers is set but the requirements have no ziglang wheel: the headers serve only a box that has a C compiler');
      const headers = await vendorPythonHeaders({ lockPath: resolve(ctx.root, p.python_headers), lockName: p.python_headers, python: target.pythonVersion, outDir: ctx.out, cacheDir, signal: ctx.signal, log: (l) => ctx.log(l) });
      if (!headers.ok) return stageFailed(ctx.stage, headers.error);
      toolchain = headers.value;
    }

    const record: WheelsRecord = {
      format: 'ternforge-wheels/1',
      target: { python_version: target.pythonVersion, platform: target.platform, implementation: 'cp', abi: abiTag(target.pythonVersion) },
      requirements: { path: requirementsPath(p), sha256: sha256(srcText), lines, overrides: replaced },
      resolver: { tool: 'uv', version: uvVersion },
      lock: { file: WHEELS_LOCK, sha256: sha256(lock) },
      wheels,
      total_size: wheels.reduce((s, w) => s + w.size, 0),
      cuda,
      proof: { passed: true, checks: proof.checks.map((c) => ({ check: c.check, status: c.status, ...(c.status === 'skipped' && c.detail !== undefined ? { detail: c.detail } : {}) })) },
    };
    writeFileSync(join(ctx.out, WHEELS_RECORD), prettyJson(record));
    rmSync(requirementsIn);
    return ok({
      summary: {
        wheels: wheels.length,
        total_size: record.total_size,
        cuda: cuda === null ? null : { runtime: cuda.runtime, torch: cuda.torch, min_driver: cuda.min_driver },
        resolve_s: Number((tResolve / 1000).toFixed(2)),
        cache: { dir: cacheName, hits: cached.value.hits, downloaded: cached.value.downloaded },
        linked: vendored.value.linked,
        copied: vendored.value.copied,
        proof: proof.checks.map((c) => ({ check: c.check, status: c.status, ...(c.command !== undefined ? { command: c.command } : {}) })),
        proof_python: proofPython,
        python_headers: toolchain === null ? null : { package: toolchain.python_headers.package, version: toolchain.python_headers.version, files: toolchain.python_headers.files, sha256: toolchain.python_headers.sha256 },
      },
    });
  },
});
