/**
 * The proof vendor-wheels gives before it succeeds: an offline install from `wheels/` alone resolves
 * every requirement for the target. Three independent checks, each naming what is missing:
 *  1. record: every locked pin has exactly one wheel in `wheels/` with that sha256, and nothing else is there;
 *  2. resolver: uv resolves the original requirements for the target's version and platform from
 *     `wheels/` with no index and no network, to exactly the locked pins (markers evaluated for the target);
 *  3. installer: `pip install --dry-run --no-index --find-links wheels` of the lock (hash-checked), run
 *     by an interpreter of the target's version (pip evaluates markers against its own Python), as
 *     serve.sh will run it. Skipped, with the reason recorded, when no such interpreter is here.
 */
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { exec, tail } from './exec.ts';
import { abiTag, blamedRequirements, normalizeName, parseCompiled, parseWheelFilename, pipPlatformArgs, sha256File, toolEnv, uvCompileArgs, type WheelFile, type WheelTarget } from './wheels.ts';

/** One check's outcome. `missing` names the requirements it could not satisfy. */
export interface ProofCheck {
  check: 'record' | 'resolver' | 'installer';
  status: 'passed' | 'failed' | 'skipped';
  /** The command run (resolver, installer). */
  command?: string;
  /** Requirements (or files) that failed, by name. */
  missing?: string[];
  detail?: string;
}

/** Check 1: the files in `wheelsDir` are exactly the recorded wheels, byte for byte. */
export async function checkRecord(wheelsDir: string, wheels: readonly WheelFile[]): Promise<ProofCheck> {
  const present = new Set(readdirSync(wheelsDir));
  const missing: string[] = [];
  const problems: string[] = [];
  for (const w of wheels) {
    if (!present.has(w.filename)) {
      missing.push(`${w.name}==${w.version}`);
      problems.push(`${w.name}==${w.version}: ${w.filename} is not in wheels/`);
      continue;
    }
    present.delete(w.filename);
    const sha = await sha256File(join(wheelsDir, w.filename));
    if (sha !== w.sha256) {
      missing.push(`${w.name}==${w.version}`);
      problems.push(`${w.filename}: sha256 ${sha}, recorded ${w.sha256}`);
    }
  }
  for (const extra of present) problems.push(`${extra}: in wheels/ but not in the lock`);
  if (problems.length === 0) return { check: 'record', status: 'passed' };
  return { check: 'record', status: 'failed', missing, detail: problems.join('\n') };
}

/** Check 2: an offline resolve of `requirementsIn` from `wheelsDir` alone yields exactly `wheels`' pins. */
export async function checkResolver(o: { uv: string; requirementsIn: string; wheelsDir: string; target: WheelTarget; wheels: readonly WheelFile[]; signal?: AbortSignal }): Promise<ProofCheck> {
  const args = uvCompileArgs(o.requirementsIn, o.target, ['--offline', '--no-cache', '--no-index', '--find-links', o.wheelsDir]);
  const r = await exec(o.uv, args, { env: toolEnv(), ...(o.signal ? { signal: o.signal } : {}) });
  if (r.code !== 0) {
    // uv names a project without its version ("uvicorn was not found"): give the locked pin.
    const pinOf = (b: string): string => {
      const w = b.includes('==') ? undefined : o.wheels.find((x) => x.name === normalizeName(b));
      return w === undefined ? b : `${w.name}==${w.version}`;
    };
    return { check: 'resolver', status: 'failed', command: r.command, missing: [...new Set(blamedRequirements(r.stderr).map(pinOf))].sort(), detail: tail(r.spawnError ?? r.stderr, 20) };
  }
  const got = parseCompiled(r.stdout).map((p) => `${p.name}==${p.version}`);
  const want = o.wheels.map((w) => `${w.name}==${w.version}`).sort();
  const extra = got.filter((g) => !want.includes(g));
  const lacking = want.filter((w) => !got.includes(w));
  if (extra.length === 0 && lacking.length === 0) return { check: 'resolver', status: 'passed', command: r.command };
  return { check: 'resolver', status: 'failed', command: r.command, missing: extra, detail: `offline resolve differs from the lock: resolved but not locked ${JSON.stringify(extra)}, locked but not resolved ${JSON.stringify(lacking)}` };
}

/** The `X.Y` version of an interpreter, or null when it does not run. */
export async function pythonMinor(python: string): Promise<string | null> {
  const r = await exec(python, ['-c', 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")'], { env: toolEnv() });
  return r.code === 0 ? r.stdout.trim() : null;
}

/** Check 3: pip's own dry-run install of the lock from `wheelsDir` with no index, for the target. */
export async function checkInstaller(o: { python: string | null; lock: string; wheelsDir: string; target: WheelTarget; signal?: AbortSignal }): Promise<ProofCheck> {
  if (o.python === null) return { check: 'installer', status: 'skipped', detail: `no CPython ${o.target.pythonVersion} on this machine to run pip for the target; the resolver check stands` };
  const scratch = mkdtempSync(join(tmpdir(), 'ternforge-pip-proof-'));
  try {
    const args = ['-m', 'pip', 'install', '--dry-run', '--ignore-installed', '--no-index', '--find-links', o.wheelsDir, '--only-binary=:all:', '--python-version', o.target.pythonVersion, ...pipPlatformArgs(o.target.platform), '--implementation', 'cp', '--abi', abiTag(o.target.pythonVersion), '--target', scratch, '-r', o.lock];
    const r = await exec(o.python, args, { env: toolEnv(), ...(o.signal ? { signal: o.signal } : {}) });
    if (r.code === 0) return { check: 'installer', status: 'passed', command: r.command };
    return { check: 'installer', status: 'failed', command: r.command, missing: blamedRequirements(r.stdout + r.stderr), detail: tail(r.spawnError ?? r.stdout + r.stderr, 20) };
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

/** All three checks; the proof holds when none failed. */
export async function proveOfflineInstall(o: { uv: string; python: string | null; requirementsIn: string; lock: string; wheelsDir: string; target: WheelTarget; wheels: readonly WheelFile[]; signal?: AbortSignal }): Promise<{ passed: boolean; checks: ProofCheck[] }> {
  const sig = o.signal ? { signal: o.signal } : {};
  const checks = [
    await checkRecord(o.wheelsDir, o.wheels),
    await checkResolver({ uv: o.uv, requirementsIn: o.requirementsIn, wheelsDir: o.wheelsDir, target: o.target, wheels: o.wheels, ...sig }),
    await checkInstaller({ python: o.python, lock: o.lock, wheelsDir: o.wheelsDir, target: o.target, ...sig }),
  ];
  return { passed: checks.every((c) => c.status !== 'failed'), checks };
}

/** Names of the wheels in a directory, `name==version` (for messages). */
export function wheelPins(wheelsDir: string): string[] {
  return readdirSync(wheelsDir)
    .map(parseWheelFilename)
    .filter((w) => w !== null)
    .map((w) => `${w.name}==${w.version}`)
    .sort();
}
