/**
 * The system Python's version line, a fact in python-env's key, probed by running the interpreter once
 * and then cached: the probe is a process start (~30 ms for a plain interpreter, ~100-250 ms behind
 * pyenv's shim, which is a bash script running `pyenv exec`), most of a no-op `all`'s engine time.
 *
 * The cache (`<workdir>/.ternforge/cache/system-python.json`) holds answers by a fingerprint of
 * everything that decides which interpreter the command starts (a few of them: `npm run` and a plain
 * shell differ in PATH), each used only while that fingerprint and the interpreter's own files are unchanged:
 *   - the command as found on PATH (and PATH itself): its path and stat identity;
 *   - behind a pyenv shim, what `pyenv exec` chooses by: PYENV_VERSION, the first `.python-version`
 *     from PYENV_DIR (default the current directory) upward, `$PYENV_ROOT/version`, and the
 *     `$PYENV_ROOT/versions` directory (a version installed or removed);
 *   - the interpreter the probe reported (realpath of sys.executable) and its libpython when shared:
 *     their stat identity (a rebuild of the same version replaces them).
 * A command that is any other script (an unknown shim that may choose by anything) is probed every time.
 */
import { spawn } from 'node:child_process';
import { closeSync, existsSync, openSync, readFileSync, readSync, statSync } from 'node:fs';
import { delimiter, dirname, isAbsolute, join } from 'node:path';
import { writeFileAtomicSync } from '../engine/fs-atomic.ts';
import { engineSchemaSet, readJsonFile } from '../engine/json-io.ts';
import type { SystemPythonProbe } from '../schemas/generated/system-python-probe.ts';

export const PROBE_SCHEMA = 'engine/system-python-probe.schema.json';
const PROBE_FILE = 'system-python.json';
/** Fingerprints kept (the schema's maxProperties). */
const MAX_ENTRIES = 8;
/** The answer when no interpreter runs: a valid fact (python-env then fails with its own error). */
const ABSENT = 'absent';

const PROBE_SCRIPT = [
  'import json, os, sys, sysconfig',
  'lib = None',
  'if sysconfig.get_config_var("Py_ENABLE_SHARED"):',
  '    lib = os.path.join(sysconfig.get_config_var("LIBDIR") or "", sysconfig.get_config_var("LDLIBRARY") or "")',
  'print(json.dumps({"version": " ".join(sys.version.split()), "executable": os.path.realpath(sys.executable), "lib": lib}))',
].join('\n');

export interface ProbeOptions {
  /** The command (default $TERNFORGE_SYSTEM_PYTHON, else python3). */
  command?: string;
  /** The environment the command runs in (default process.env). */
  env?: NodeJS.ProcessEnv;
  /** Its working directory (default process.cwd()): pyenv reads `.python-version` from here upward. */
  cwd?: string;
}

export interface ProbeResult {
  /** `sys.version`'s words joined by one space (no path of this machine), or `absent`. */
  version: string;
  /** Whether the answer came from the cache (no process started). */
  cached: boolean;
}

function statId(path: string): string | null {
  try {
    const s = statSync(path, { bigint: true });
    return `${s.dev}:${s.ino}:${s.size}:${s.mtimeNs}:${s.ctimeNs}`;
  } catch {
    return null;
  }
}

function readOr(path: string, fallback: string | null): string | null {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return fallback;
  }
}

function onPath(command: string, env: NodeJS.ProcessEnv, cwd: string): string | null {
  if (command.includes('/')) return isAbsolute(command) ? command : join(cwd, command);
  for (const dir of (env.PATH ?? '').split(delimiter)) {
    if (dir === '') continue;
    const p = join(dir, command);
    try {
      if (statSync(p).isFile()) return p;
    } catch {
      // not in this directory
    }
  }
  return null;
}

function head(path: string, bytes: number): string {
  const fd = openSync(path, 'r');
  try {
    const buf = Buffer.alloc(bytes);
    return buf.subarray(0, readSync(fd, buf, 0, bytes, 0)).toString('latin1');
  } finally {
    closeSync(fd);
  }
}

/** What `pyenv exec` decides by, read the way pyenv reads it (pyenv-version-file, pyenv-version-name). */
function pyenvSelection(pyenvRoot: string, env: NodeJS.ProcessEnv, cwd: string): Record<string, string | null> {
  let localFile: string | null = null;
  for (let dir = env.PYENV_DIR || cwd; ; dir = dirname(dir)) {
    const f = join(dir, '.python-version');
    if (existsSync(f)) {
      localFile = f;
      break;
    }
    if (dirname(dir) === dir) break;
  }
  return {
    pyenvRoot,
    pyenvVersion: env.PYENV_VERSION ?? null,
    localFile,
    local: localFile === null ? null : readOr(localFile, null),
    global: readOr(join(pyenvRoot, 'version'), null),
    versionsDir: statId(join(pyenvRoot, 'versions')),
  };
}

/**
 * The fingerprint of what decides the interpreter, or null when it cannot be known without running the
 * command (not found, or a script other than pyenv's shim).
 */
function fingerprint(command: string, env: NodeJS.ProcessEnv, cwd: string): string | null {
  const found = onPath(command, env, cwd);
  if (found === null) return null;
  const id = statId(found);
  if (id === null) return null;
  const fp: Record<string, unknown> = { command, path: env.PATH ?? '', found, id };
  const start = head(found, 4096);
  if (start.startsWith('#!')) {
    // pyenv's shim: `export PYENV_ROOT="..."` then `exec ".../libexec/pyenv" exec "$program" "$@"`.
    const root = /^export PYENV_ROOT="([^"]+)"$/m.exec(start)?.[1];
    if (root === undefined || !/pyenv"? exec /.test(start)) return null;
    fp.pyenv = pyenvSelection(root, env, cwd);
  }
  return JSON.stringify(fp);
}

function runProbe(command: string, env: NodeJS.ProcessEnv, cwd: string): Promise<{ version: string; executable: string; lib: string | null } | null> {
  return new Promise((resolve) => {
    // -S: `site` cannot change the answer and was a third of the probe's time.
    const child = spawn(command, ['-S', '-c', PROBE_SCRIPT], { stdio: ['ignore', 'pipe', 'ignore'], env, cwd });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.once('error', () => resolve(null));
    child.once('close', (code) => {
      try {
        const v = JSON.parse(out) as { version: unknown; executable: unknown; lib: unknown };
        if (code === 0 && typeof v.version === 'string' && typeof v.executable === 'string' && (v.lib === null || typeof v.lib === 'string')) {
          resolve({ version: v.version, executable: v.executable, lib: v.lib });
          return;
        }
      } catch {
        // not a probe's answer
      }
      resolve(null);
    });
  });
}

/** The system Python's version line, from the cache in `cacheDir` while it holds (see above). */
export async function systemPython(cacheDir: string, o: ProbeOptions = {}): Promise<ProbeResult> {
  const env = o.env ?? process.env;
  const cwd = o.cwd ?? process.cwd();
  const command = o.command ?? (env.TERNFORGE_SYSTEM_PYTHON || 'python3');
  const fp = fingerprint(command, env, cwd);
  const file = join(cacheDir, PROBE_FILE);
  const schemas = engineSchemaSet(join(dirname(cacheDir), 'schema-cache'));
  const read = readJsonFile<SystemPythonProbe>(file, schemas, PROBE_SCHEMA);
  const entries = read.ok && read.value !== null ? read.value.entries : {}; // an unreadable cache is only a cache
  const c = fp === null ? undefined : entries[fp];
  if (c !== undefined && statId(c.executable) === c.executableId && (c.lib === null || statId(c.lib) === c.libId)) {
    return { version: c.version, cached: true };
  }
  const probed = await runProbe(command, env, cwd);
  if (probed === null) return { version: ABSENT, cached: false };
  const executableId = statId(probed.executable);
  const libId = probed.lib === null ? null : statId(probed.lib);
  if (fp !== null && executableId !== null && (probed.lib === null || libId !== null)) {
    const kept = Object.entries(entries).filter(([k]) => k !== fp).sort((a, b) => a[1].probedAt.localeCompare(b[1].probedAt)).slice(-(MAX_ENTRIES - 1));
    const entry = { version: probed.version, executable: probed.executable, executableId, lib: probed.lib, libId, probedAt: new Date().toISOString() };
    const out: SystemPythonProbe = { schema: 2, entries: { ...Object.fromEntries(kept), [fp]: entry } };
    writeFileAtomicSync(file, JSON.stringify(out, null, 2) + '\n');
  }
  return { version: probed.version, cached: false };
}
