/**
 * Where the workers' virtual environment lives and what it reports about itself.
 * The directory is env TERNFORGE_VENV when set, else one per requirements file, shared by every profile
 * that names it: `<workdir>/.ternforge/venv` for the default python/requirements.txt (the CPU set),
 * `<workdir>/.ternforge/venv-cuda` for python/requirements-cuda.lock.txt, and so on (`venv-` and the file's
 * name without `requirements-` and `.lock.txt`/`.txt`). The python-env stage writes `<venv>/ternforge-env.json` last; the engine reads the tool
 * versions (python, torch) that enter the keys of stages declaring them from it.
 */
import { basename, join } from 'node:path';
import type { PythonEnvInfo } from '../schemas/generated/python-env-info.ts';
import { ENGINE_SCHEMAS, readJsonFile, type SchemaSet } from './json-io.ts';
import type { Tool } from './types.ts';

export type { PythonEnvInfo };

/** The file python-env writes last into the venv. */
export const ENV_INFO_FILE = 'ternforge-env.json';

/** The requirements file python-env installs when its profile section names none. */
export const DEFAULT_REQUIREMENTS = 'python/requirements.txt';

export function venvDir(workdir: string, requirements: string = DEFAULT_REQUIREMENTS): string {
  if (process.env.TERNFORGE_VENV) return process.env.TERNFORGE_VENV;
  if (requirements === DEFAULT_REQUIREMENTS) return join(workdir, '.ternforge', 'venv');
  const stem = basename(requirements).replace(/\.lock\.txt$|\.txt$/, '').replace(/^requirements-?/, '');
  return join(workdir, '.ternforge', `venv-${stem === '' ? 'custom' : stem}`);
}

export function venvPython(dir: string): string {
  return join(dir, 'bin', 'python');
}

/** The venv's ternforge-env.json, or null when absent or invalid. */
export function readEnvInfo(dir: string, schemas: SchemaSet): PythonEnvInfo | null {
  const read = readJsonFile<PythonEnvInfo>(join(dir, ENV_INFO_FILE), schemas, ENGINE_SCHEMAS.pythonEnvInfo);
  return read.ok ? read.value : null;
}

/** node always; python and torch from ternforge-env.json (absent before python-env ran). */
export function toolVersions(dir: string, schemas: SchemaSet): Partial<Record<Tool, string>> {
  const info = readEnvInfo(dir, schemas);
  const out: Partial<Record<Tool, string>> = { node: process.version };
  if (info !== null) {
    out.python = info.python;
    if (info.torch !== null) out.torch = info.torch;
  }
  return out;
}
