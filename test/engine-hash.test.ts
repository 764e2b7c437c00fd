/** File digests through the native mmap helper and through read(2): the same bytes, sha256sum's answer. */
import { execFileSync, spawnSync } from 'node:child_process';
import { randomFillSync } from 'node:crypto';
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { FileHasher } from '../engine/hash.ts';
import { engineSchemaSet } from '../engine/json-io.ts';
import { expectedMmapAddon, mmapAddonForHashing } from '../engine/native/addon.ts';

const MiB = 1024 * 1024;
let dir: string;
const files: Record<string, string> = {};

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'ternforge-hash-'));
  // Around the worker threshold (4 MiB) and the 16 MiB mmap window, with tails that are not page multiples.
  const sizes = { small: 1000, threshold: 4 * MiB, oneWindowPlus: 16 * MiB + 4097, windows: 3 * 16 * MiB - 1 };
  for (const [name, size] of Object.entries(sizes)) {
    files[name] = join(dir, `${name}.bin`);
    writeFileSync(files[name], randomFillSync(Buffer.alloc(size)));
  }
  // Written a while ago: no racy-margin wait.
  execFileSync('touch', ['-d', '1 minute ago', ...Object.values(files)]);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function sha256sum(path: string): string {
  return execFileSync('sha256sum', [path], { encoding: 'utf8' }).split(' ')[0]!;
}

async function digestsWith(addon: string | null): Promise<{ hashIo: string; digests: Record<string, string>; hashedBytes: number; mappedBytes: number }> {
  const cache = join(dir, 'cache.json');
  const hasher = new FileHasher(cache, engineSchemaSet(), { poolSize: 2, addon });
  const names = Object.keys(files);
  const got = await hasher.hashAll(names.map((n) => files[n]!));
  await hasher.close();
  rmSync(cache, { force: true });
  return { hashIo: hasher.hashIo, digests: Object.fromEntries(names.map((n, i) => [n, got[i]!.sha256])), hashedBytes: hasher.stats.hashedBytes, mappedBytes: hasher.stats.mappedBytes };
}

type Helper = { map(fd: number, offset: number, length: number): ArrayBuffer; unmap(b: ArrayBuffer): boolean };

const ccExists = spawnSync('sh', ['-c', 'command -v "${CC:-cc}"']).status === 0;
/**
 * Where the add-on must exist: Linux with a C compiler (npm install's postinstall builds it). There a
 * missing add-on fails these tests; only a machine without a compiler skips them, as they cannot run.
 */
const addonExpected = process.platform === 'linux' && ccExists;
function addon(): string {
  expect(existsSync(expectedMmapAddon()), `${expectedMmapAddon()} missing although a C compiler exists: run npm run build:native`).toBe(true);
  return expectedMmapAddon();
}

describe('the native mmap helper', () => {
  test.skipIf(!addonExpected)('npm install built it wherever Linux has a C compiler', () => {
    addon();
  });

  test('a failed build says why and leaves hashing on read(2); --strict fails', () => {
    const build = (strict: boolean): { status: number | null; stderr: string } =>
      spawnSync(process.execPath, ['--import', 'tsx', join(import.meta.dirname, '..', 'engine', 'native', 'build.ts'), ...(strict ? ['--strict'] : [])], {
        encoding: 'utf8', env: { ...process.env, CC: join(dir, 'no-such-cc') },
      });
    const lenient = build(false);
    expect(lenient.status).toBe(0);
    expect(lenient.stderr).toContain('the native mmap helper was not built');
    expect(lenient.stderr).toContain('no-such-cc');
    expect(build(true).status).toBe(1);
  });

  test('mmap and read(2) give sha256sum digests for every size around the threshold and window', async () => {
    const expected = Object.fromEntries(Object.entries(files).map(([n, p]) => [n, sha256sum(p)]));
    const read = await digestsWith(null);
    expect(read.hashIo).toBe('read');
    expect(read.digests).toEqual(expected);
    expect(read.mappedBytes).toBe(0);
    if (!addonExpected) return; // no C compiler: no add-on can exist here; read(2) is all there is
    const mapped = await digestsWith(addon());
    expect(mapped.hashIo).toBe('mmap');
    expect(mapped.digests).toEqual(expected);
    expect(mapped.hashedBytes).toBe(read.hashedBytes);
    // Every file the worker threads took (those of at least 4 MiB) went through mmap.
    expect(mapped.mappedBytes).toBe(mapped.hashedBytes - 1000);
  });

  test.skipIf(!addonExpected)('map() views the file, unmap() releases the mapping, bad arguments are refused', async () => {
    const mm = createRequire(import.meta.url)(addon()) as Helper;
    const path = files.oneWindowPlus!;
    const mappings = (): number => readFileSync('/proc/self/maps', 'utf8').split('\n').filter((l) => l.endsWith(path)).length;
    const fd = openSync(path, 'r');
    const before = mappings();
    try {
      const view = mm.map(fd, 4096, 8192);
      expect(Buffer.from(view).equals(readFileSync(path).subarray(4096, 4096 + 8192))).toBe(true);
      expect(mappings()).toBe(before + 1);
      expect(mm.unmap(view)).toBe(false);
      expect(view.byteLength).toBe(0);
      expect(() => mm.unmap(view)).toThrow('not yet unmapped');
      // The finalizer that unmaps runs on a later turn of the event loop.
      for (let i = 0; i < 100 && mappings() > before; i++) await new Promise((r) => setTimeout(r, 10));
      expect(mappings()).toBe(before);
      expect(() => mm.map(fd, 1, 10)).toThrow('mmap: Invalid argument');
      expect(() => mm.map(fd, 0, 0)).toThrow('three non-negative integers');
      expect(() => mm.unmap('x' as unknown as ArrayBuffer)).toThrow('an ArrayBuffer from map()');
    } finally {
      closeSync(fd);
    }
  });

  test.skipIf(!addonExpected)('a window whose file was truncated reads as zeros past the end, and unmap() says so (no SIGBUS)', () => {
    const mm = createRequire(import.meta.url)(addon()) as Helper;
    const path = join(dir, 'shrinks.bin');
    const bytes = randomFillSync(Buffer.alloc(4 * 65536));
    writeFileSync(path, bytes);
    const fd = openSync(path, 'r');
    try {
      const view = mm.map(fd, 0, bytes.length);
      truncateSync(path, 65536 + 100); // the pages wholly past the new end are gone
      const seen = Buffer.from(new Uint8Array(view)); // reading them raised SIGBUS; the handler mapped zeros
      expect(seen.subarray(0, 65536).equals(bytes.subarray(0, 65536))).toBe(true);
      expect(seen.subarray(2 * 65536).every((b) => b === 0)).toBe(true);
      expect(mm.unmap(view)).toBe(true);
      // The next window of the same file is clean again.
      const again = mm.map(fd, 0, 4096);
      expect(Buffer.from(new Uint8Array(again)).equals(bytes.subarray(0, 4096))).toBe(true);
      expect(mm.unmap(again)).toBe(false);
    } finally {
      closeSync(fd);
    }
  });

  test('TERNFORGE_HASH_IO: a bad value, or mmap without the helper, is a clear error', () => {
    const absent = join(dir, 'absent.node');
    expect(mmapAddonForHashing({ TERNFORGE_HASH_IO: 'fast' })).toEqual({ ok: false, error: 'must be "mmap" or "read", not "fast"' });
    expect(mmapAddonForHashing({ TERNFORGE_HASH_IO: 'mmap' }, absent)).toMatchObject({ ok: false, error: expect.stringContaining('run npm run build:native') });
    expect(mmapAddonForHashing({}, absent)).toEqual({ ok: true, value: null });
    expect(mmapAddonForHashing({ TERNFORGE_HASH_IO: 'read' })).toEqual({ ok: true, value: null });
    expect(mmapAddonForHashing({ TERNFORGE_HASH_IO: 'mmap' }, files.small)).toEqual({ ok: true, value: files.small });
    const cli = spawnSync(process.execPath, ['--import', 'tsx', join(import.meta.dirname, '..', 'pipeline.ts'), 'status', '--workdir', dir], {
      encoding: 'utf8', env: { ...process.env, TERNFORGE_HASH_IO: 'fast' },
    });
    expect(cli.status).toBe(2);
    expect(cli.stderr).toContain('error: TERNFORGE_HASH_IO: must be "mmap" or "read", not "fast"');
  });
});
