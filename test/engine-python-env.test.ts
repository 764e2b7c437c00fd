/** The python-env stage, for real, in a temp venv with an empty requirements file (never the shared venv). */
import { cpSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { actions, Rig } from './fixtures/engine/rig.ts';

let rig: Rig;
let venv: string;
beforeAll(() => {
  rig = new Rig('venv');
  venv = join(rig.base, 'venv');
  rig.env.TERNFORGE_VENV = venv;
  for (const f of ['stages/python-env.ts', 'stages/system-python.ts', 'engine/venv.ts']) {
    mkdirSync(join(rig.root, f, '..'), { recursive: true });
    cpSync(join(import.meta.dirname, '..', f), join(rig.root, f));
  }
  writeFileSync(join(rig.root, 'requirements-empty.txt'), '# nothing to install\n');
  const profile = { name: 'tiny', description: 'venv toy', stages: { 'python-env': { requirements: 'requirements-empty.txt' }, a: { value: 1 } } };
  writeFileSync(join(rig.root, 'profiles', 'tiny.json'), JSON.stringify(profile));
});
afterAll(() => rig.cleanup());

test('python-env builds the venv in place, records its versions, and is then fresh', async () => {
  const first = await rig.json('all');
  expect(first.code).toBe(0);
  expect(actions(first)).toEqual({ 'python-env': 'ran', a: 'ran' });
  const info = JSON.parse(readFileSync(join(venv, 'ternforge-env.json'), 'utf8'));
  expect(info).toMatchObject({ schema: 1, torch: null, transformers: null });
  expect(info.python).toMatch(/^3\.\d+\.\d+$/);
  const lock = JSON.parse(rig.read('.ternforge/tiny/lock.json'));
  expect(lock.stages['python-env'].outputMode).toBe('in-place');
  expect(lock.stages.a.keyData.tools).toEqual({ node: process.version, python: info.python });
  expect(lock.stages['python-env'].keyData.facts.systemPython).toMatch(/^3\.\d+\.\d+ /);
  const second = await rig.json('all');
  expect(actions(second)).toEqual({ 'python-env': 'fresh', a: 'fresh' });
  expect(second.hashedBytes).toBe(0);
  // Changing the requirements file rebuilds the venv (ours: cleared) and reruns nothing else whose key is unchanged.
  writeFileSync(join(rig.root, 'requirements-empty.txt'), '# still nothing\n');
  const third = await rig.run('status', '--why');
  expect(third.stdout).toBe('stale  python-env\n       input requirements-empty.txt: modified\nstale  a\n       upstream python-env: stale, runs first\n');
  const rebuilt = await rig.json('all');
  expect(actions(rebuilt)).toEqual({ 'python-env': 'ran', a: 'ran' });
});
