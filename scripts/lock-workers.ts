/**
 * `npm run lock:workers`: compile python/requirements-cuda.txt into python/requirements-cuda.lock.txt, the
 * CUDA workers' environment that python-env installs with --require-hashes: every distribution pinned with the
 * sha256 of each of its wheels, resolved once for every Linux CPython >= 3.11 (uv's universal resolution:
 * markers where the set differs by version or platform). Binary wheels only, from PyPI. Run it after editing
 * the requirements; test/workers-env.test.ts checks that the lock still matches them.
 */
import { join } from 'node:path';
import { exec } from '../lib/submission/exec.ts';
import { toolEnv } from '../lib/submission/wheels.ts';

export const CUDA_REQUIREMENTS = 'python/requirements-cuda.txt';
export const CUDA_LOCK = 'python/requirements-cuda.lock.txt';
/** Dependencies the lock leaves out, each with its reason (uv --overrides, an impossible marker). */
export const CUDA_OVERRIDES = 'python/requirements-cuda.overrides.txt';
/** The oldest CPython the lock resolves for (numpy 2.4 needs 3.11). */
export const LOCK_PYTHON = '3.11';

export function lockArgs(input: string, overrides: string, output: string): string[] {
  return ['pip', 'compile', input, '--universal', '--python-version', LOCK_PYTHON, '--generate-hashes', '--only-binary', ':all:',
    '--overrides', overrides, '--index-url', 'https://pypi.org/simple', '--no-config', '--custom-compile-command', 'npm run lock:workers', '-o', output];
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const root = join(import.meta.dirname, '..');
  const uv = process.env.TERNFORGE_UV ?? join(root, '.ternforge', 'venv', 'bin', 'uv');
  const r = await exec(uv, lockArgs(join(root, CUDA_REQUIREMENTS), join(root, CUDA_OVERRIDES), join(root, CUDA_LOCK)), { env: toolEnv(), cwd: root });
  process.stderr.write(r.stderr);
  process.exitCode = r.code ?? 1;
}
