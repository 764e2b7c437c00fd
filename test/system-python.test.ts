/**
 * The system Python probe's cache (stages/system-python.ts): a second probe starts no process, and the
 * cached answer follows every switch pyenv's shim would make (a fake pyenv root whose shim chooses an
 * interpreter the way pyenv does: PYENV_VERSION, then `.python-version` upward, then `$PYENV_ROOT/version`).
 */
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { systemPython } from '../stages/system-python.ts';

let base: string;
let pyenvRoot: string;
let cache: string;
let env: NodeJS.ProcessEnv;

/** A fake interpreter that counts its runs and answers the probe as version `v`. */
function fakeVersion(v: string): void {
  const bin = join(pyenvRoot, 'versions', v, 'bin');
  mkdirSync(bin, { recursive: true });
  const exe = join(bin, 'python3');
  writeFileSync(exe, `#!/bin/sh\necho run >> "${base}/runs-${v}"\necho '{"version": "${v} (fake)", "executable": "${exe}", "lib": null}'\n`);
  chmodSync(exe, 0o755);
}

beforeAll(() => {
  base = mkdtempSync(join(tmpdir(), 'ternforge-syspy-'));
  pyenvRoot = join(base, 'pyenv');
  mkdirSync(join(pyenvRoot, 'shims'), { recursive: true });
  fakeVersion('3.11.7');
  fakeVersion('3.12.1');
  writeFileSync(join(pyenvRoot, 'version'), '3.11.7\n');
  // The shape of pyenv's own shim (the probe recognises it by its PYENV_ROOT export and `pyenv" exec`),
  // with pyenv's version selection written out in sh in place of libexec/pyenv.
  const shim = join(pyenvRoot, 'shims', 'python3');
  writeFileSync(shim, [
    '#!/bin/sh',
    `export PYENV_ROOT="${pyenvRoot}"`,
    '# exec "$PYENV_ROOT/libexec/pyenv" exec "$program" "$@" (selection inlined below)',
    'v="$PYENV_VERSION"',
    'd="${PYENV_DIR:-$PWD}"',
    'while [ -z "$v" ]; do',
    '  if [ -f "$d/.python-version" ]; then v=$(cat "$d/.python-version"); break; fi',
    '  [ "$d" = / ] && break; d=$(dirname "$d")',
    'done',
    '[ -n "$v" ] || v=$(cat "$PYENV_ROOT/version")',
    'exec "$PYENV_ROOT/versions/$v/bin/python3" "$@"',
    '',
  ].join('\n'));
  chmodSync(shim, 0o755);
  cache = join(base, 'workdir', '.ternforge', 'cache');
  env = { PATH: `${join(pyenvRoot, 'shims')}:/usr/bin:/bin` };
});
afterAll(() => rmSync(base, { recursive: true, force: true }));

test('the probe is cached, and the cache follows pyenv: PYENV_VERSION, .python-version, the global version', async () => {
  const project = join(base, 'project', 'sub');
  mkdirSync(project, { recursive: true });
  const o = { env, cwd: project };
  expect(await systemPython(cache, o)).toEqual({ version: '3.11.7 (fake)', cached: false });
  expect(await systemPython(cache, o)).toEqual({ version: '3.11.7 (fake)', cached: true });
  // Another PATH (npm run prepends node_modules/.bin) is another fingerprint, kept beside the first.
  const npmLike = { env: { PATH: `${join(base, 'node_modules', '.bin')}:${env.PATH}` }, cwd: project };
  expect(await systemPython(cache, npmLike)).toEqual({ version: '3.11.7 (fake)', cached: false });
  expect(await systemPython(cache, o)).toEqual({ version: '3.11.7 (fake)', cached: true });
  expect(await systemPython(cache, npmLike)).toEqual({ version: '3.11.7 (fake)', cached: true });
  // A `.python-version` in a parent directory switches the shim: the cache must not answer 3.11.7.
  writeFileSync(join(base, 'project', '.python-version'), '3.12.1\n');
  expect(await systemPython(cache, o)).toEqual({ version: '3.12.1 (fake)', cached: false });
  expect(await systemPython(cache, o)).toEqual({ version: '3.12.1 (fake)', cached: true });
  // PYENV_VERSION wins over the file.
  expect(await systemPython(cache, { env: { ...env, PYENV_VERSION: '3.11.7' }, cwd: project })).toEqual({ version: '3.11.7 (fake)', cached: false });
  // Without the local file, the global version file decides; changing it is seen.
  rmSync(join(base, 'project', '.python-version'));
  writeFileSync(join(pyenvRoot, 'version'), '3.12.1\n');
  expect(await systemPython(cache, o)).toEqual({ version: '3.12.1 (fake)', cached: false });
  // The chosen interpreter rebuilt in place (same path, new file): probed again.
  expect(await systemPython(cache, o)).toMatchObject({ cached: true });
  fakeVersion('3.12.1');
  expect(await systemPython(cache, o)).toEqual({ version: '3.12.1 (fake)', cached: false });
  // A damaged cache file is only a cache: probed again and rewritten.
  writeFileSync(join(cache, 'system-python.json'), '{"schema": 2, "entries": ');
  expect(await systemPython(cache, o)).toEqual({ version: '3.12.1 (fake)', cached: false });
  expect(await systemPython(cache, o)).toEqual({ version: '3.12.1 (fake)', cached: true });
});

test('an interpreter that is not pyenv\'s shim nor a binary (an unknown script) is probed every time', async () => {
  const dir = join(base, 'other-shim');
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'python3'), `#!/bin/sh\nexec "${join(pyenvRoot, 'versions', '3.11.7', 'bin', 'python3')}" "$@"\n`);
  chmodSync(join(dir, 'python3'), 0o755);
  const o = { env: { PATH: `${dir}:/usr/bin:/bin` }, cwd: base };
  expect(await systemPython(cache, o)).toEqual({ version: '3.11.7 (fake)', cached: false });
  expect(await systemPython(cache, o)).toEqual({ version: '3.11.7 (fake)', cached: false });
});

test('the real system python3 (behind whatever PATH finds first) answers once, then from the cache', async () => {
  const real = join(base, 'real-cache');
  const first = await systemPython(real);
  expect(first.version).toMatch(/^3\.\d+\.\d+ /);
  expect(first.cached).toBe(false);
  expect(await systemPython(real)).toEqual({ version: first.version, cached: true });
});
