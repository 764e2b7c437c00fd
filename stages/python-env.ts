/**
 * python-env: the Python workers' virtual environment, built in place from a pinned requirements file.
 * A venv cannot be moved once built, so this stage is `in-place` (under the workspace lock, outside
 * temp-and-rename and the run cache). Its directory is $TERNFORGE_VENV when set, else
 * `<workdir>/.ternforge/venv`, shared by all profiles. Its key hashes the requirements file and the
 * system Python's version. It writes `<venv>/ternforge-env.json` last; when that file already names
 * this key, nothing is done.
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
import { ENV_INFO_FILE, readEnvInfo, venvDir, venvPython, type PythonEnvInfo } from '../engine/venv.ts';
import { systemPython } from './system-python.ts';
import type { PythonEnvParams } from '../schemas/generated/python-env.ts';
import { exec as run } from '../lib/submission/exec.ts';
import type { PythonVersions } from '../schemas/generated/python-versions.ts';

const DEFAULT_REQUIREMENTS = 'python/requirements.txt';
/** The interpreter that creates the venv. */
const SYSTEM_PYTHON = process.env.TERNFORGE_SYSTEM_PYTHON || 'python3';

function requirementsPath(p: PythonEnvParams): string {
  return p.requirements ?? DEFAULT_REQUIREMENTS;
}

/** Run a command (zx, lib/submission/exec.ts), streaming every output line into the stage log; the last lines on failure. */
async function exec(ctx: StageContext<PythonEnvParams>, cmd: string, args: string[]): Promise<Result<string[], Failure>> {
  const lines: string[] = [];
  const r = await run(cmd, args, {
    env: { ...process.env, PIP_DISABLE_PIP_VERSION_CHECK: '1' },
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
  'print(json.dumps({"python": platform.python_version(), "torch": v("torch"), "transformers": v("transformers")}))',
].join('\n');

export const stage = defineStage<PythonEnvParams>({
  name: 'python-env',
  summary: "Build the Python workers' virtual environment from a pinned requirements file",
  code: ['stages/python-env.ts', 'stages/system-python.ts', 'engine/venv.ts', 'lib/worker-results.ts', 'schemas/workers/python-versions.schema.json'],
  schema: 'schemas/stages/python-env.schema.json',
  inputs: (p) => [requirementsPath(p)],
  tools: ['node'],
  outputs: 'in-place',
  dir: venvDir,
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
    const pip = await exec(ctx, venvPython(dir), ['-m', 'pip', 'install', '--progress-bar', 'off', '-r', requirements]);
    if (!pip.ok) return pip;
    const versions = await exec(ctx, venvPython(dir), ['-c', VERSIONS_SCRIPT]);
    if (!versions.ok) return versions;
    const probed = checkPythonJson<PythonVersions>('python-env version probe', 'workers/python-versions.schema.json', versions.value.at(-1));
    if (!probed.ok) return stageFailed(ctx.stage, probed.error);
    const found = probed.value;
    const info: PythonEnvInfo = { schema: 1, key: ctx.key, python: found.python, torch: found.torch, transformers: found.transformers, requirements: sha256(readFileSync(requirements)) };
    // Last: the marker that says this venv is built for this key.
    writeFileAtomicSync(join(dir, ENV_INFO_FILE), prettyJson(info));
    return ok({ summary: { action: hasVenv && !ours ? 'installed-into-existing' : 'built', ...info } });
  },
});
