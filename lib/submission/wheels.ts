/**
 * Vendoring the serving wheels for a target platform: resolve the pinned requirements with a resolver
 * that takes the target's Python version and platform (uv: pip evaluates markers against the Python it
 * runs on), download each locked wheel once into a shared cache, hard-link it into `wheels/`, and write
 * the locked requirements with the sha256 of exactly the vendored file.
 *
 *   requirements (+ overrides) --uv pip compile--> lock (name==version, candidate hashes)
 *     --cache hit, or pip download --no-deps--> <cache>/<target>/<wheel> --link--> wheels/<wheel>
 */
import { createHash } from 'node:crypto';
import { createReadStream, existsSync, mkdirSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import { linkOrCopy } from '../../engine/files.ts';
import { err, ok, type Result } from '../../engine/result.ts';
import type { WheelsFailure } from '../failures.ts';
import { exec, tail, type ExecOutput } from './exec.ts';

/** The platform the wheels are for. */
export interface WheelTarget {
  /** CPython minor version, e.g. `3.12`. */
  pythonVersion: string;
  /** uv's spelling, `<arch>-manylinux_<major>_<minor>`, e.g. `x86_64-manylinux_2_28`. */
  platform: string;
}

/** One pinned distribution of the lock. */
export interface LockedPin {
  /** Normalised project name (PEP 503). */
  name: string;
  version: string;
  /** sha256 digests the index lists for this version (every platform's file). */
  hashes: string[];
}

/** One vendored wheel file, as recorded in wheels.json. */
export interface WheelFile {
  name: string;
  version: string;
  filename: string;
  sha256: string;
  size: number;
}

/** The target as a failure names it: `CPython 3.11 on x86_64-manylinux_2_28`. */
export function targetName(t: WheelTarget): string {
  return `CPython ${t.pythonVersion} on ${t.platform}`;
}

/** PEP 503 name normalisation. */
export function normalizeName(name: string): string {
  return name.toLowerCase().replace(/[-_.]+/g, '-');
}

/** Name and version of a wheel file name (`{name}-{version}(-{build})?-{py}-{abi}-{plat}.whl`). */
export function parseWheelFilename(filename: string): { name: string; version: string } | null {
  if (!filename.endsWith('.whl')) return null;
  const parts = filename.slice(0, -4).split('-');
  if (parts.length !== 5 && parts.length !== 6) return null;
  return { name: normalizeName(parts[0]!), version: parts[1]! };
}

/**
 * pip's `--platform` flags for a uv platform: `x86_64-manylinux_2_28` -> every manylinux tag a
 * glibc 2.28 system accepts (`manylinux_2_28_x86_64` down to `manylinux_2_5_x86_64`, plus the legacy
 * aliases manylinux2014/2010/1). pip does not expand a given `--platform` to older glibc tags itself.
 */
export function pipPlatformArgs(platform: string): string[] {
  const m = /^([a-z0-9_]+)-manylinux_(\d+)_(\d+)$/.exec(platform);
  if (m === null) throw new Error(`unsupported platform ${platform}: want <arch>-manylinux_<major>_<minor>`);
  const [arch, major, minor] = [m[1]!, Number(m[2]), Number(m[3])];
  const tags: string[] = [];
  for (let g = minor; g >= 5 && major === 2; g--) {
    tags.push(`manylinux_2_${g}_${arch}`);
    const legacy = ({ 17: 'manylinux2014', 12: 'manylinux2010', 5: 'manylinux1' } as Record<number, string>)[g];
    if (legacy !== undefined) tags.push(`${legacy}_${arch}`);
  }
  return tags.flatMap((t) => ['--platform', t]);
}

/** The CPython ABI tag of a target: `3.12` -> `cp312`. */
export function abiTag(pythonVersion: string): string {
  return `cp${pythonVersion.replace('.', '')}`;
}

/** Cache sub-directory of a target: wheels downloaded for one target never serve another. */
export function targetKey(t: WheelTarget): string {
  return `cp${t.pythonVersion}-${t.platform}`;
}

/** The shared download cache: $TERNFORGE_WHEEL_CACHE, else ~/.cache/ternforge/wheels. */
export function wheelCacheDir(): string {
  return resolve(process.env.TERNFORGE_WHEEL_CACHE || join(homedir(), '.cache', 'ternforge', 'wheels'));
}

/**
 * The environment pip and uv run in: the machine's pip/uv configuration (config files, find-links,
 * constraints, extra indexes) is shut out so only the profile's declared sources count; certificate
 * settings stay.
 */
export function toolEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (k.startsWith('PIP_') && k !== 'PIP_CERT') continue;
    if (k.startsWith('UV_') || k === 'VIRTUAL_ENV' || k === 'PYTHONPATH' || k === 'PYTHONHOME') continue;
    env[k] = v;
  }
  env.PIP_CONFIG_FILE = '/dev/null';
  env.PIP_DISABLE_PIP_VERSION_CHECK = '1';
  env.PIP_NO_INPUT = '1';
  return env;
}

/** Requirement lines of a requirements file with the overrides put in place of same-named pins. */
export function applyOverrides(text: string, overrides: readonly string[]): { lines: string[]; replaced: string[] } {
  const nameOf = (line: string): string => normalizeName(/^\s*([A-Za-z0-9][A-Za-z0-9._-]*)/.exec(line)?.[1] ?? '');
  const byName = new Map(overrides.map((o) => [nameOf(o), o.trim()]));
  const replaced: string[] = [];
  const lines: string[] = [];
  for (const raw of text.split('\n')) {
    const line = raw.replace(/(^|\s)#.*$/, '').trim();
    if (line === '') continue;
    const o = byName.get(nameOf(line));
    if (o !== undefined) {
      replaced.push(`${line} -> ${o}`);
      byName.delete(nameOf(line));
      lines.push(o);
    } else lines.push(line);
  }
  lines.push(...byName.values());
  return { lines, replaced };
}

/** Parse `uv pip compile --generate-hashes` output (`name==version \` then `--hash=sha256:...` lines). */
export function parseCompiled(text: string): LockedPin[] {
  const pins: LockedPin[] = [];
  for (const raw of text.replace(/\\\n/g, ' ').split('\n')) {
    const line = raw.replace(/(^|\s)#.*$/, '').trim();
    if (line === '') continue;
    const m = /^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)(.*)$/.exec(line);
    if (m === null) continue;
    const hashes = [...m[3]!.matchAll(/--hash=sha256:([0-9a-f]{64})/g)].map((h) => h[1]!);
    pins.push({ name: normalizeName(m[1]!), version: m[2]!, hashes });
  }
  return pins.sort((a, b) => a.name.localeCompare(b.name));
}

/** The requirement names a resolver's or installer's error text blames (best effort, for messages). */
export function blamedRequirements(text: string): string[] {
  const found = new Set<string>();
  const patterns = [
    /No matching distribution found for ([^\s,;]+)/g,
    /Could not find a version that satisfies the requirement ([^\s,;]+)/g,
    /there is no version of ([^\s,;]+?)(?:\s|$|,)/g,
    /Because ([^\s,;]+) was not found in the (?:provided package locations|package registry)/g,
    /no wheels? (?:with a matching [^\n]*?)?(?:for|of) ([^\s,;]+)/gi,
  ];
  for (const re of patterns) for (const m of text.matchAll(re)) found.add(m[1]!.replace(/[.:]+$/, ''));
  return [...found].sort();
}

/** The sha256 of a file, streamed. */
export function sha256File(path: string): Promise<string> {
  return new Promise((res, rej) => {
    const h = createHash('sha256');
    createReadStream(path)
      .on('data', (d) => h.update(d))
      .on('error', rej)
      .on('end', () => res(h.digest('hex')));
  });
}

/** The resolver's command line for a target (shared by the online resolve and the offline proof). */
export function uvCompileArgs(input: string, t: WheelTarget, extra: readonly string[]): string[] {
  return ['pip', 'compile', input, '--python-version', t.pythonVersion, '--python-platform', t.platform, '--only-binary', ':all:', '--no-header', '--no-annotate', '--no-config', ...extra];
}

/** Resolve `input` (a requirements file) for the target; online, from the declared sources. */
export async function resolveLock(o: { uv: string; input: string; target: WheelTarget; findLinks: readonly string[]; indexUrl?: string; signal?: AbortSignal }): Promise<Result<LockedPin[], WheelsFailure>> {
  const extra = ['--generate-hashes', ...o.findLinks.flatMap((f) => ['--find-links', f]), ...(o.indexUrl !== undefined ? ['--index-url', o.indexUrl] : [])];
  const r = await exec(o.uv, uvCompileArgs(o.input, o.target, extra), { env: toolEnv(), ...(o.signal ? { signal: o.signal } : {}) });
  if (r.spawnError !== undefined) return err({ reason: 'tool-failed', command: r.command, detail: r.spawnError });
  if (r.code !== 0) return err({ reason: 'requirements-unresolvable', target: targetName(o.target), requirements: blamedRequirements(r.stderr), detail: tail(r.stderr, 20) });
  return ok(parseCompiled(r.stdout));
}

/** What `ensureCached` did, for the log and the record. */
export interface CacheOutcome {
  files: Map<string, string>;
  hits: number;
  downloaded: number;
}

function cachedFileFor(dir: string, pin: LockedPin): string | undefined {
  if (!existsSync(dir)) return undefined;
  return readdirSync(dir)
    .filter((f) => {
      const w = parseWheelFilename(f);
      return w !== null && w.name === pin.name && w.version === pin.version;
    })
    .sort()[0];
}

/**
 * Every pin's wheel for the target in the shared cache (`<cache>/<target>/`): hits are used as they
 * are; the rest are fetched in one `pip download --no-deps` into a temp dir and renamed in. Each file's
 * sha256 must be one the resolver listed for that version.
 */
export async function ensureCached(o: { python: string; cacheDir: string; pins: readonly LockedPin[]; target: WheelTarget; findLinks: readonly string[]; indexUrl?: string; signal?: AbortSignal; log?: (line: string) => void }): Promise<Result<CacheOutcome, WheelsFailure>> {
  const dir = join(o.cacheDir, targetKey(o.target));
  mkdirSync(dir, { recursive: true });
  const files = new Map<string, string>();
  const missing: LockedPin[] = [];
  for (const pin of o.pins) {
    const f = cachedFileFor(dir, pin);
    if (f === undefined) missing.push(pin);
    else files.set(pin.name, join(dir, f));
  }
  const hits = files.size;
  if (missing.length > 0) {
    const tmp = join(dir, `.download-${process.pid}-${Date.now()}`);
    mkdirSync(tmp, { recursive: true });
    try {
      const reqFile = join(tmp, 'missing.txt');
      const text = missing.map((p) => `${p.name}==${p.version}${p.hashes.map((h) => ` --hash=sha256:${h}`).join('')}`).join('\n') + '\n';
      writeFileSync(reqFile, text);
      o.log?.(`downloading ${missing.length} wheel(s) for ${targetKey(o.target)}: ${missing.map((p) => `${p.name}==${p.version}`).join(', ')}`);
      const args = ['-m', 'pip', 'download', '--no-deps', '--only-binary=:all:', '--progress-bar', 'off', '--python-version', o.target.pythonVersion, ...pipPlatformArgs(o.target.platform), '--implementation', 'cp', '--abi', abiTag(o.target.pythonVersion), '-d', tmp, '-r', reqFile, ...o.findLinks.flatMap((f) => ['--find-links', f]), ...(o.indexUrl !== undefined ? ['--index-url', o.indexUrl] : [])];
      const r: ExecOutput = await exec(o.python, args, { env: toolEnv(), ...(o.signal ? { signal: o.signal } : {}) });
      if (r.spawnError !== undefined) return err({ reason: 'tool-failed', command: r.command, detail: r.spawnError });
      if (r.code !== 0) {
        const blamed = blamedRequirements(r.stdout + r.stderr);
        return err({ reason: 'wheel-unavailable', target: targetName(o.target), requirements: blamed.length > 0 ? blamed : missing.map((p) => `${p.name}==${p.version}`), detail: tail(r.stdout + r.stderr, 20) });
      }
      for (const pin of missing) {
        const f = cachedFileFor(tmp, pin);
        if (f === undefined) return err({ reason: 'wheel-unavailable', target: targetName(o.target), requirements: [`${pin.name}==${pin.version}`], detail: `pip download saved no wheel for ${pin.name}==${pin.version}` });
        const sha = await sha256File(join(tmp, f));
        if (pin.hashes.length > 0 && !pin.hashes.includes(sha)) return err({ reason: 'wheel-hash-mismatch', filename: f, expected: pin.hashes, actual: sha });
        renameSync(join(tmp, f), join(dir, f));
        files.set(pin.name, join(dir, f));
      }
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  }
  return ok({ files, hits, downloaded: missing.length });
}

/** Link each cached wheel into `wheelsDir` and record it; verifies each file's sha256 against the lock. */
export async function vendorInto(wheelsDir: string, pins: readonly LockedPin[], files: ReadonlyMap<string, string>): Promise<Result<{ wheels: WheelFile[]; linked: number; copied: number }, WheelsFailure>> {
  mkdirSync(wheelsDir, { recursive: true });
  const wheels: WheelFile[] = [];
  let linked = 0;
  let copied = 0;
  for (const pin of pins) {
    const src = files.get(pin.name)!;
    const filename = src.slice(src.lastIndexOf('/') + 1);
    const sha = await sha256File(src);
    if (pin.hashes.length > 0 && !pin.hashes.includes(sha)) return err({ reason: 'wheel-hash-mismatch', filename, expected: pin.hashes, actual: sha });
    if (linkOrCopy(src, join(wheelsDir, filename)) === 'linked') linked++;
    else copied++;
    wheels.push({ name: pin.name, version: pin.version, filename, sha256: sha, size: statSync(src).size });
  }
  return ok({ wheels, linked, copied });
}

/**
 * The locked requirements that ship: one exact pin per wheel, each bound to the vendored file's sha256
 * when `withHashes` (pip then installs in hash-checking mode).
 */
export function lockText(wheels: readonly WheelFile[], header: readonly string[], withHashes: boolean): string {
  const lines = header.map((h) => `# ${h}`);
  for (const w of [...wheels].sort((a, b) => a.name.localeCompare(b.name))) lines.push(`${w.name}==${w.version}${withHashes ? ` --hash=sha256:${w.sha256}` : ''}`);
  return lines.join('\n') + '\n';
}
