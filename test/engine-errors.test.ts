/** Specific errors, exact stderr: unknown stage or profile, a cycle, a missing input, a failed worker, failing stages. */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, test } from 'vitest';
import { Rig } from './fixtures/engine/rig.ts';

let rig: Rig;
afterEach(() => rig.cleanup());

describe('errors', () => {
  test('unknown stage and unknown profile: exit 2, the known names listed', async () => {
    rig = new Rig();
    const stage = await rig.run('nope');
    expect([stage.code, stage.stdout, stage.stderr]).toEqual([2, '', 'error: unknown stage "nope" (known: a, b, c, d)\n']);
    const profile = await rig.run('all', '--profile', 'nope');
    expect([profile.code, profile.stderr]).toEqual([2, 'error: unknown profile "nope" (known: tiny)\n']);
    const status = await rig.run('status', '--profile', 'nope');
    expect([status.code, status.stderr]).toEqual([2, 'error: unknown profile "nope" (known: tiny)\n']);
    // --help lists the profiles there are (every file of profiles/), not a list written by hand.
    writeFileSync(join(rig.root, 'profiles', 'extra.json'), readFileSync(join(rig.root, 'profiles', 'tiny.json')));
    const help = await rig.run('--help');
    expect(help.stdout.replace(/\s+/g, ' ')).toContain('--profile <name> profile (profiles/<name>.json): extra, tiny (default: "tiny")');
  });

  test('a cycle is printed as its path', async () => {
    rig = new Rig('cycle');
    const r = await rig.run('all');
    expect([r.code, r.stderr]).toEqual([2, 'error: the pipeline has a cycle: a -> b -> c -> a\n']);
  });

  test('a missing declared input names the stage and the path; nothing runs', async () => {
    rig = new Rig();
    rig.setParams('b', { value: 'b1', inputs: ['data/missing.bin'] });
    const r = await rig.run('all');
    expect(r.code).toBe(1);
    expect(r.stderr.split('\n').slice(-2)).toEqual(['error: stage b: declared input data/missing.bin does not exist', '']);
    expect(rig.exists('.ternforge/tiny/b')).toBe(false);
  });

  test('an invalid profile fails its schema with the field named', async () => {
    rig = new Rig();
    rig.setParams('a', { value: 1, bogus: true });
    const r = await rig.run('status');
    expect([r.code, r.stderr]).toEqual([1, 'error: profiles/tiny.json is invalid:\n  /stages/a must NOT have additional properties (bogus)\n']);
  });

  test('a failed worker reports its exit code and the tail of its stderr', async () => {
    rig = new Rig();
    rig.setParams('b', { worker: { command: 'fail' } });
    const r = await rig.run('all');
    expect(r.code).toBe(1);
    const tail = Array.from({ length: 40 }, (_, i) => `worker log line ${i + 20}`).join('\n');
    expect(r.stderr).toMatch(
      new RegExp(`error: stage b: worker exited with code 3\\n  command: \\S+/bin/python -m ternforge fail --config \\S+/worker-b-[0-9a-f]+\\.json\\n--- last lines of its stderr ---\\n${tail}\\n--- end ---\\n$`),
    );
    expect(rig.exists('.ternforge/tiny/b')).toBe(false);
    expect(Object.keys(JSON.parse(rig.read('.ternforge/tiny/lock.json')).stages)).toEqual(['a']);
  });

  test('a worker that succeeds returns its events in order', async () => {
    rig = new Rig();
    rig.setParams('b', { worker: { command: 'ok', config: { x: 1 } } });
    const r = await rig.run('b');
    expect(r.code).toBe(0);
    // Not a terminal here: the finished total is logged as a line (a terminal rewrites it in place instead).
    expect(r.stderr).toContain('[b] progress: ok 1/1\n');
    expect(JSON.parse(rig.read('.ternforge/tiny/b/outputs/result.json')).upstream.worker).toEqual([
      { event: 'progress', done: 1, total: 1 },
      { event: 'result', echo: { x: 1 } },
    ]);
  });

  test('a stage that fails or throws leaves no outputs and no lock entry', async () => {
    rig = new Rig();
    rig.setParams('a', { value: 1, fail: 'fail' });
    const failed = await rig.run('all');
    expect([failed.code, failed.stderr.split('\n').slice(-3)]).toEqual([1, ['error: stage a failed: asked to fail', '  value: 1', '']]);
    rig.setParams('a', { value: 1, fail: 'throw' });
    const thrown = await rig.run('all');
    expect(thrown.code).toBe(1);
    expect(thrown.stderr).toContain('error: stage a threw: asked to throw\nError: asked to throw\n');
    expect(rig.exists('.ternforge/tiny/lock.json')).toBe(false);
    expect(rig.exists('.ternforge/tiny/a')).toBe(false);
  });
});
