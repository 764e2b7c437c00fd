/**
 * The CPython headers vendor-wheels ships for Triton's C launchers (lib/submission/python-headers.ts):
 * real .deb packages built here with dpkg-deb, served by a real HTTP server on loopback. The pinned package
 * is downloaded once, checked by size and sha256, unpacked to toolchain/include/, and described by
 * toolchain.json; a wrong download, a package without Python.h, one holding a link, and a lock without the
 * target's CPython are refused by name with nothing left behind. The committed lock pins the qwen3.5-4b
 * target's CPython.
 */
import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { formatStageFailure } from '../lib/failures.ts';
import { readHeadersPin, vendorPythonHeaders, type ToolchainRecord } from '../lib/submission/python-headers.ts';

const root = join(import.meta.dirname, '..');
const work = mkdtempSync(join(tmpdir(), 'tf-headers-'));
let server: Server;
let base = '';
const served: Record<string, Buffer> = {};
const hits: Record<string, number> = {};

/** A .deb like libpython3.X-dev: usr/include/python3.X/{Python.h,...}, the arch pyconfig.h, a static lib. */
function buildDeb(name: string, opts: { pythonH?: boolean; link?: boolean } = {}): Buffer {
  const tree = join(work, `tree-${name}`);
  const inc = join(tree, 'usr', 'include', 'python3.12');
  mkdirSync(join(tree, 'DEBIAN'), { recursive: true });
  mkdirSync(inc, { recursive: true });
  mkdirSync(join(tree, 'usr', 'include', 'x86_64-linux-gnu', 'python3.12'), { recursive: true });
  mkdirSync(join(tree, 'usr', 'lib'), { recursive: true });
  writeFileSync(join(tree, 'DEBIAN', 'control'), `Package: libpython3.12-dev\nVersion: 3.12.3-1\nArchitecture: amd64\nMaintainer: test <t@example.org>\nDescription: test headers\n`);
  if (opts.pythonH !== false) writeFileSync(join(inc, 'Python.h'), '#include "pyconfig.h"\n#define PY_VERSION_HEX 0x030c03f0\n');
  writeFileSync(join(inc, 'pyconfig.h'), '#include <x86_64-linux-gnu/python3.12/pyconfig.h>\n');
  writeFileSync(join(tree, 'usr', 'include', 'x86_64-linux-gnu', 'python3.12', 'pyconfig.h'), '#define HAVE_TEST 1\n');
  writeFileSync(join(tree, 'usr', 'lib', 'libpython3.12.a'), 'not shipped');
  if (opts.link === true) symlinkSync('/etc/passwd', join(inc, 'escape.h'));
  const out = join(work, `${name}.deb`);
  execFileSync('dpkg-deb', ['--build', '--root-owner-group', tree, out], { stdio: 'ignore' });
  return readFileSync(out);
}

function lockFor(name: string, bytes: Buffer, edit: Record<string, unknown> = {}): string {
  const path = join(work, `lock-${name}-${Object.keys(edit).join('-')}.json`);
  writeFileSync(path, JSON.stringify({
    '3.12': { package: 'libpython3.12-dev', version: '3.12.3-1', distribution: 'test', url: `${base}/${name}.deb`, size: bytes.length, sha256: createHash('sha256').update(bytes).digest('hex'), ...edit },
  }));
  return path;
}

beforeAll(async () => {
  server = createServer((req, res) => {
    const name = (req.url ?? '').slice(1);
    hits[name] = (hits[name] ?? 0) + 1;
    const body = served[name];
    if (body === undefined) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { 'content-length': body.length }).end(body);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  served['good.deb'] = buildDeb('good');
  served['noheader.deb'] = buildDeb('noheader', { pythonH: false });
  served['link.deb'] = buildDeb('link', { link: true });
});

afterAll(() => {
  server.close();
  rmSync(work, { recursive: true, force: true });
});

const run = (lockPath: string, outDir: string, cacheDir: string, python = '3.12') =>
  vendorPythonHeaders({ lockPath, lockName: 'python/python-headers.json', python, outDir, cacheDir, log: () => {} });

describe('vendoring the CPython headers', () => {
  test('downloads once, checks, unpacks usr/include only, and records what it shipped', async () => {
    const cache = join(work, 'cache-good');
    const out = join(work, 'out-good');
    mkdirSync(out);
    const lock = lockFor('good', served['good.deb']!);
    const first = await run(lock, out, cache);
    expect(first.ok).toBe(true);
    const rec = JSON.parse(readFileSync(join(out, 'toolchain', 'toolchain.json'), 'utf8')) as ToolchainRecord;
    expect(rec.python_headers).toMatchObject({ python: '3.12', include_root: 'include', files: 3, package: 'libpython3.12-dev' });
    expect(readFileSync(join(out, 'toolchain', 'include', 'python3.12', 'Python.h'), 'utf8')).toContain('PY_VERSION_HEX');
    expect(existsSync(join(out, 'toolchain', 'include', 'x86_64-linux-gnu', 'python3.12', 'pyconfig.h'))).toBe(true);
    expect(existsSync(join(out, 'toolchain', 'lib'))).toBe(false);
    expect(readdirSync(out)).toEqual(['toolchain']);
    expect(hits['good.deb']).toBe(1);
    rmSync(join(out, 'toolchain'), { recursive: true });
    expect((await run(lock, out, cache)).ok).toBe(true); // from the cache
    expect(hits['good.deb']).toBe(1);
  });

  test('a download that is not the pinned bytes is refused and not cached', async () => {
    const cache = join(work, 'cache-bad');
    const out = join(work, 'out-bad');
    mkdirSync(out);
    const r = await run(lockFor('good', served['good.deb']!, { sha256: 'a'.repeat(64) }), out, cache);
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.error.reason).toBe('python-headers-invalid');
    expect(formatStageFailure(r.error)).toMatch(/sha256 [0-9a-f]{64}, pinned a{64}/);
    expect(readdirSync(out)).toEqual([]);
    expect(readdirSync(join(cache, 'python-headers'))).toEqual([]);
    const short = await run(lockFor('good', served['good.deb']!, { size: 7 }), out, cache);
    expect(!short.ok && formatStageFailure(short.error)).toMatch(/bytes, pinned 7/);
    const gone = await run(lockFor('missing', served['good.deb']!), out, cache);
    expect(!gone.ok && formatStageFailure(gone.error)).toMatch(/HTTP 404/);
  });

  test('a package without Python.h, or holding a link, leaves nothing', async () => {
    for (const [name, why] of [['noheader', /holds no usr\/include\/python3\.12\/Python\.h/], ['link', /python3\.12\/escape\.h is not a regular file \(a symbolic link\)/]] as const) {
      const out = join(work, `out-${name}`);
      mkdirSync(out);
      const r = await run(lockFor(name, served[`${name}.deb`]!), out, join(work, `cache-${name}`));
      expect(!r.ok && formatStageFailure(r.error)).toMatch(why);
      expect(readdirSync(out)).toEqual([]);
    }
  });

  test('a lock without the target CPython names what it pins', async () => {
    const r = await run(lockFor('good', served['good.deb']!), join(work, 'out-none'), join(work, 'cache-none'), '3.11');
    expect(!r.ok && r.error.reason).toBe('python-headers-unpinned');
    expect(!r.ok && formatStageFailure(r.error)).toBe('python/python-headers.json pins no headers for CPython 3.11: it pins 3.12');
  });

  test("the committed lock pins the qwen3.5-4b profile's CPython, and the profile asks for it", () => {
    const profile = JSON.parse(readFileSync(join(root, 'profiles', 'qwen3.5-4b.json'), 'utf8')) as { stages: Record<string, Record<string, unknown>> };
    const vw = profile.stages['vendor-wheels']!;
    expect(vw['python_headers']).toBe('python/python-headers.json');
    const pin = readHeadersPin(join(root, 'python', 'python-headers.json'), 'python/python-headers.json', vw['python_version'] as string);
    expect(pin.ok).toBe(true);
    expect(pin.ok && pin.value.url).toMatch(/^http:\/\/archive\.ubuntu\.com\/ubuntu\/pool\/main\/p\/python3\.12\/libpython3\.12-dev_/);
    expect(readFileSync(join(root, 'python', 'requirements-serve-cuda.txt'), 'utf8')).toMatch(/^ziglang==\d+\.\d+\.\d+$/m);
  });
});
