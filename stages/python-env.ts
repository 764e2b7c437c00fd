/**
 * python-env: the Python workers' virtual environment, built in place from a pinned requirements file.
 * A venv cannot be moved once built, so this stage is `in-place` (under the workspace lock, outside
 * temp-and-rename and the run cache). Its directory is $TERNFORGE_VENV when set, else one per
 * requirements file (engine/venv.ts: `.ternforge/venv` for the CPU set, `.ternforge/venv-cuda` for the
 * CUDA set), shared by the profiles that name it. Its key hashes the requirements file and the
 * system Python's version. A requirements file with hashes (a lock, e.g. python/requirements-cuda.lock.txt)
 * is installed with --require-hashes and binary wheels only. It writes `<venv>/ternforge-env.json` last, with
 * the Gated DeltaNet kernels transformers selects there (python/ternforge/kernels.py); when that file
 * already names this key, nothing is done.
 *
 * A venv this stage did not build (no ternforge-env.json) or one given by $TERNFORGE_VENV is never
 * cleared: requirements are installed into it instead.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { prettyJson, sha256 } from '../engine/digest.ts';
import { writeFileAtomicSync } from '../engine/fs-atomic.ts';
import { engineSchemaSet } from '../engine/json-io.ts';
import { err, ok, type Result } from '../engine/result.ts';
import type { Failure } from '../engine/failure.ts';
import { defineStage, type StageContext } from '../engine/types.ts';
import { stageFailed } from '../lib/failures.ts';
import { checkPythonJson } from '../lib/worker-results.ts';
import { DEFAULT_REQUIREMENTS, ENV_INFO_FILE, readEnvInfo, venvDir, venvPython, type PythonEnvInfo } from '../engine/venv.ts';
import { systemPython } from './system-python.ts';
import type { PythonEnvParams } from '../schemas/generated/python-env.ts';
import { exec as run } from '../lib/submission/exec.ts';
import type { PythonVersions } from '../schemas/generated/python-versions.ts';

/** The interpreter that creates the venv. */
const SYSTEM_PYTHON = process.env.TERNFORGE_SYSTEM_PYTHON || 'python3';

function requirementsPath(p: PythonEnvParams): string {
  return p.requirements ?? DEFAULT_REQUIREMENTS;
}

/** Run a command (zx, lib/submission/exec.ts), streaming every output line into the stage log; the last lines on failure. */
async function exec(ctx: StageContext<PythonEnvParams>, cmd: string, args: string[], env: Record<string, string> = {}): Promise<Result<string[], Failure>> {
  const lines: string[] = [];
  const r = await run(cmd, args, {
    env: { ...process.env, PIP_DISABLE_PIP_VERSION_CHECK: '1', ...env },
    signal: ctx.signal,
    onLine: (line) => {
      lines.push(line);
      ctx.log(line);
    },
  });
  if (r.code === 0) return ok(lines);
  return err({ reason: 'worker-failed', stage: ctx.stage, command: r.command, exitCode: r.code, signal: r.signal, stderrTail: r.spawnError ?? lines.slice(-40).join('\n') });
}

const VERSIONS_SCRIPT = [
  'import json, platform',
  'from importlib import metadata',
  'def v(n):',
  '    try: return metadata.version(n)',
  '    except metadata.PackageNotFoundError: return None',
  'kernels = None',
  'if v("transformers") is not None and v("torch") is not None:',
  '    from ternforge.kernels import probe',
  '    kernels = probe()',
  'print(json.dumps({"python": platform.python_version(), "torch": v("torch"), "transformers": v("transformers"), "kernels": kernels}))',
].join('\n');

/**
 * A lock (every pin with --hash) is installed hash-checked, from wheels only, and as it stands (--no-deps): it
 * is the whole resolved set, so pip resolves nothing more (the lock may leave out a dependency on purpose:
 * python/requirements-cuda.overrides.txt).
 */
function installArgs(requirements: string): string[] {
  const locked = /--hash=sha256:/.test(readFileSync(requirements, 'utf8'));
  return ['-m', 'pip', 'install', '--progress-bar', 'off', ...(locked ? ['--require-hashes', '--only-binary', ':all:', '--no-deps'] : []), '-r', requirements];
}

export const stage = defineStage<PythonEnvParams>({
  name: 'python-env',
  summary: "Build the Python workers' virtual environment from a pinned requirements file",
  code: ['stages/python-env.ts', 'stages/system-python.ts', 'engine/venv.ts', 'lib/worker-results.ts', 'schemas/workers/python-versions.schema.json', 'python/ternforge/kernels.py'],
  schema: 'schemas/stages/python-env.schema.json',
  inputs: (p) => [requirementsPath(p)],
  tools: ['node'],
  outputs: 'in-place',
  dir: (workdir, p) => venvDir(workdir, requirementsPath(p)),
  marker: ENV_INFO_FILE,
  facts: async (_params, _root, cacheDir) => ({ systemPython: (await systemPython(cacheDir)).version }),
  async run(ctx) {
    const dir = ctx.out;
    const schemas = engineSchemaSet();
    const requirements = join(ctx.root, requirementsPath(ctx.params));
    const before = readEnvInfo(dir, schemas);
    if (before !== null && before.key === ctx.key && existsSync(venvPython(dir))) {
      ctx.log(`${dir} already built for this key; nothing to do`);
      return ok({ summary: { action: 'none', ...before } });
    }
    const ours = before !== null && !process.env.TERNFORGE_VENV;
    const hasVenv = existsSync(join(dir, 'pyvenv.cfg'));
    if (!hasVenv || ours) {
      ctx.log(`${ours ? 'rebuilding' : 'creating'} ${dir}`);
      const made = await exec(ctx, SYSTEM_PYTHON, ['-m', 'venv', ...(ours ? ['--clear'] : []), dir]);
      if (!made.ok) return made;
    } else {
      ctx.log(`${dir} is a venv this stage did not build: installing into it, never clearing it`);
    }
    const pip = await exec(ctx, venvPython(dir), installArgs(requirements));
    if (!pip.ok) return pip;
    const versions = await exec(ctx, venvPython(dir), ['-c', VERSIONS_SCRIPT], { PYTHONPATH: join(ctx.root, 'python') });
    if (!versions.ok) return versions;
    const probed = checkPythonJson<PythonVersions>('python-env version probe', 'workers/python-versions.schema.json', versions.value.at(-1));
    if (!probed.ok) return stageFailed(ctx.stage, probed.error);
    const found = probed.value;
    const info: PythonEnvInfo = { schema: 1, key: ctx.key, python: found.python, torch: found.torch, transformers: found.transformers, kernels: found.kernels, requirements: sha256(readFileSync(requirements)) };
    if (found.kernels !== null) ctx.log(`Gated DeltaNet kernels: ${found.kernels.fast_path ? 'flash-linear-attention' : "transformers' PyTorch delta rule"} (${Object.entries(found.kernels.selected).map(([f, m]) => `${f}: ${m}`).join(', ')})`);
    // Last: the marker that says this venv is built for this key.
    writeFileAtomicSync(join(dir, ENV_INFO_FILE), prettyJson(info));
    return ok({ summary: { action: hasVenv && !ours ? 'installed-into-existing' : 'built', ...info } });
  },
});
