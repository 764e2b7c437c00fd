/**
 * The target CPython's headers for the submission's C toolchain (`toolchain/`, vendor-wheels' output
 * beside `wheels/`). Triton builds a C launcher for every kernel with `#include <Python.h>`, and a fresh
 * Ubuntu 24.04 has no python3.12-dev; with these headers and the ziglang wheel the server can build them
 * anyway (python/ternforge_server/toolchain.py).
 *
 * The headers come from one pinned distribution package per CPython minor (python/python-headers.json: its
 * URL, size and sha256), downloaded once into the wheel cache (`python-headers/<sha256>.deb`), checked
 * byte for byte, and unpacked with Debian's own `dpkg-deb`; only `usr/include/` is kept, and only regular
 * files and directories (a link in the package is refused: nothing in the submission may point outside it).
 */
import { existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { prettyJson, sha256 } from '../../engine/digest.ts';
import { err, ok, type Result } from '../../engine/result.ts';
import type { WheelsFailure } from '../failures.ts';
import { exec } from './exec.ts';
import { submissionNames } from './layout.ts';
import { sha256File } from './wheels.ts';

/** One package of the lock. */
export interface HeadersPin {
  package: string;
  version: string;
  distribution: string;
  url: string;
  size: number;
  sha256: string;
}

/** toolchain/toolchain.json, which the server reads (python_headers.python, include_root). */
export interface ToolchainRecord {
  format: 'ternforge-toolchain/1';
  python_headers: HeadersPin & { python: string; include_root: 'include'; files: number };
}

export const TOOLCHAIN_RECORD = 'toolchain.json';

/** The pin of CPython `python` in the lock at `lockPath` (`lockName` for messages), checked field by field. */
export function readHeadersPin(lockPath: string, lockName: string, python: string): Result<HeadersPin, WheelsFailure> {
  const unpinned = (detail: string): Result<HeadersPin, WheelsFailure> => err({ reason: 'python-headers-unpinned', lock: lockName, python, detail });
  let lock: Record<string, unknown>;
  try {
    lock = JSON.parse(readFileSync(lockPath, 'utf8')) as Record<string, unknown>;
  } catch (e) {
    return unpinned(`cannot read it: ${(e as Error).message}`);
  }
  const pin = lock[python] as Partial<HeadersPin> | undefined;
  const pinned = Object.keys(lock).filter((k) => /^3\.\d+$/.test(k));
  if (pin === undefined || typeof pin !== 'object') return unpinned(`it pins ${pinned.length > 0 ? pinned.join(', ') : 'none'}`);
  for (const f of ['package', 'version', 'distribution', 'url'] as const) if (typeof pin[f] !== 'string' || pin[f] === '') return unpinned(`${f} is missing`);
  if (!/^https?:\/\/[^/]+\/.+\.deb$/.test(pin.url!)) return unpinned(`url ${pin.url} is not an http(s) URL of a .deb`);
  if (!Number.isInteger(pin.size) || pin.size! <= 0) return unpinned('size is not a positive integer');
  if (typeof pin.sha256 !== 'string' || !/^[0-9a-f]{64}$/.test(pin.sha256)) return unpinned('sha256 is not 64 hex digits');
  return ok(pin as HeadersPin);
}

/** The package in the cache, downloaded and checked when absent (a wrong download is deleted, never kept). */
async function cachedPackage(pin: HeadersPin, cacheDir: string, signal: AbortSignal | undefined, log: (l: string) => void): Promise<Result<string, WheelsFailure>> {
  const dir = join(cacheDir, 'python-headers');
  const file = join(dir, `${pin.sha256}.deb`);
  if (existsSync(file) && (await sha256File(file)) === pin.sha256) return ok(file);
  mkdirSync(dir, { recursive: true });
  const partial = `${file}.partial-${process.pid}`;
  const invalid = (detail: string): Result<string, WheelsFailure> => {
    rmSync(partial, { force: true });
    return err({ reason: 'python-headers-invalid', url: pin.url, detail });
  };
  log(`downloading ${pin.package} ${pin.version} (${(pin.size / 1e6).toFixed(1)} MB) from ${pin.url}`);
  let bytes: Buffer;
  try {
    const res = await fetch(pin.url, signal !== undefined ? { signal } : {});
    if (!res.ok) return invalid(`HTTP ${res.status} ${res.statusText}`);
    bytes = Buffer.from(await res.arrayBuffer());
  } catch (e) {
    if (signal?.aborted === true) throw e;
    return invalid(`download failed: ${(e as Error).message}`);
  }
  if (bytes.length !== pin.size) return invalid(`${bytes.length} bytes, pinned ${pin.size}`);
  const got = sha256(bytes);
  if (got !== pin.sha256) return invalid(`sha256 ${got}, pinned ${pin.sha256}`);
  writeFileSync(partial, bytes);
  renameSync(partial, file);
  return ok(file);
}

/** Every entry under `dir`, relative; the first one that is neither a regular file nor a directory, if any. */
function walk(dir: string): { files: string[]; odd: string | null } {
  const files: string[] = [];
  let odd: string | null = null;
  const go = (d: string): void => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) go(p);
      else if (e.isFile()) files.push(relative(dir, p));
      else odd ??= relative(dir, p);
    }
  };
  go(dir);
  return { files: files.sort(), odd };
}

/**
 * `outDir/toolchain/include/` (the package's usr/include) and `outDir/toolchain/toolchain.json`, for
 * CPython `python` as the lock pins it. Nothing is left in outDir on failure.
 */
export async function vendorPythonHeaders(o: {
  lockPath: string;
  lockName: string;
  python: string;
  outDir: string;
  cacheDir: string;
  signal?: AbortSignal;
  log: (line: string) => void;
}): Promise<Result<ToolchainRecord, WheelsFailure>> {
  const pinRead = readHeadersPin(o.lockPath, o.lockName, o.python);
  if (!pinRead.ok) return pinRead;
  const pin = pinRead.value;
  const deb = await cachedPackage(pin, o.cacheDir, o.signal, o.log);
  if (!deb.ok) return deb;
  const { TOOLCHAIN_DIR } = submissionNames();
  const scratch = join(o.outDir, `.${TOOLCHAIN_DIR}.partial`);
  const final = join(o.outDir, TOOLCHAIN_DIR);
  rmSync(scratch, { recursive: true, force: true });
  mkdirSync(scratch, { recursive: true });
  const invalid = (detail: string): Result<ToolchainRecord, WheelsFailure> => {
    rmSync(scratch, { recursive: true, force: true });
    return err({ reason: 'python-headers-invalid', url: pin.url, detail });
  };
  const x = await exec('dpkg-deb', ['-x', deb.value, join(scratch, 'pkg')], o.signal !== undefined ? { signal: o.signal } : {});
  if (x.spawnError !== undefined) return invalid(`cannot run dpkg-deb (Debian's dpkg package): ${x.spawnError}`);
  if (x.code !== 0) return invalid(`dpkg-deb -x failed: ${x.stderr.trim().split('\n').pop() ?? `exit ${x.code}`}`);
  const include = join(scratch, 'pkg', 'usr', 'include');
  if (!existsSync(join(include, `python${o.python}`, 'Python.h'))) return invalid(`holds no usr/include/python${o.python}/Python.h`);
  const { files, odd } = walk(include);
  if (odd !== null) return invalid(`usr/include/${odd} is not a regular file (${lstatSync(join(include, odd)).isSymbolicLink() ? 'a symbolic link' : 'a special file'})`);
  const dest = join(scratch, TOOLCHAIN_DIR);
  mkdirSync(dest);
  renameSync(include, join(dest, 'include'));
  const record: ToolchainRecord = { format: 'ternforge-toolchain/1', python_headers: { ...pin, python: o.python, include_root: 'include', files: files.length } };
  writeFileSync(join(dest, TOOLCHAIN_RECORD), prettyJson(record));
  rmSync(final, { recursive: true, force: true });
  renameSync(dest, final);
  rmSync(scratch, { recursive: true, force: true });
  o.log(`CPython ${o.python} headers: ${files.length} files of ${pin.package} ${pin.version} (${pin.distribution}) in ${TOOLCHAIN_DIR}/include`);
  return ok(record);
}
