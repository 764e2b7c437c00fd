/** Freshness, early cutoff, run cache, status --why, dry-run, force, links and gc: the real CLI on a toy chain a -> b -> c, a -> d. */
import { appendFileSync, lstatSync, readdirSync, readFileSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, test } from 'vitest';
import { actions, Rig } from './fixtures/engine/rig.ts';

let rig: Rig;
beforeEach(() => {
  rig = new Rig();
});
afterEach(() => rig.cleanup());

describe('freshness', () => {
  test('a second all runs nothing and hashes zero bytes', async () => {
    const first = await rig.json('all');
    expect(first.code).toBe(0);
    expect(actions(first)).toEqual({ a: 'ran', b: 'ran', c: 'ran', d: 'ran' });
    expect(first.hashedBytes).toBeGreaterThan(0);
    const second = await rig.json('all');
    expect(actions(second)).toEqual({ a: 'fresh', b: 'fresh', c: 'fresh', d: 'fresh' });
    expect(second.hashedBytes).toBe(0);
    expect(second.hashedFiles).toBe(0);
    expect(JSON.parse(rig.read('.ternforge/tiny/c/outputs/result.json'))).toMatchObject({ stage: 'c', value: { n: 1, deep: { k: 'x' } } });
  });

  test('changing one parameter reruns exactly the stages downstream of it', async () => {
    await rig.run('all');
    rig.setParams('b', { value: 'b2' });
    const r = await rig.json('all');
    expect(actions(r)).toEqual({ a: 'fresh', b: 'ran', c: 'ran', d: 'fresh' });
    expect(r.stages.find((s) => s.stage === 'b')!.reasons).toEqual([{ kind: 'param', path: 'b.value', from: 'b1', to: 'b2' }]);
    expect(r.stages.find((s) => s.stage === 'c')!.reasons).toEqual([{ kind: 'upstream', stage: 'b', change: 'changed' }]);
  });

  test('--set overrides a parameter for one run, held to the schema; without it the run cache restores', async () => {
    await rig.run('all');
    const set = await rig.json('all', '--set', 'b.value=b2', '--set', 'd.value={"n":2}');
    expect(actions(set)).toEqual({ a: 'fresh', b: 'ran', c: 'ran', d: 'ran' });
    expect(set.stages.find((s) => s.stage === 'b')!.reasons).toEqual([{ kind: 'param', path: 'b.value', from: 'b1', to: 'b2' }]);
    expect(JSON.parse(rig.read('.ternforge/tiny/d/outputs/result.json')).value).toEqual({ n: 2 }); // JSON, not a string
    const back = await rig.json('all');
    expect(actions(back)).toEqual({ a: 'fresh', b: 'restored', c: 'restored', d: 'restored' });
    const notStage = await rig.run('all', '--set', 'nope.value=1');
    expect(notStage.code).toBe(2);
    expect(notStage.stderr).toContain('--set nope.value=1: "nope" is not a stage (known: a, b, c, d)');
    const noKey = await rig.run('all', '--set', 'b=1');
    expect(noKey.code).toBe(2);
    expect(noKey.stderr).toContain('--set b=1: name a key inside the stage section');
    const offSchema = await rig.run('all', '--set', 'b.sleepMs=-5');
    expect(offSchema.code).toBe(2); // a usage error, like the malformed ones
    expect(offSchema.stderr).toMatch(/^error: --set b\.sleepMs=-5: \/stages\/b\/sleepMs must be >= 0 \(profiles\/tiny\.json's schema\)$/m);
    expect(offSchema.stderr.trim().split('\n')).toHaveLength(1);
    expect(offSchema.stderr).toContain('sleepMs');
  });

  test('touching a file without changing its bytes reruns nothing', async () => {
    await rig.run('all');
    const code = join(rig.root, 'code', 'a.txt');
    const later = new Date(Date.now() + 5000);
    utimesSync(code, later, later);
    writeFileSync(code, readFileSync(code)); // a rewrite with the same bytes: new mtime and ctime
    const r = await rig.json('all');
    expect(actions(r)).toEqual({ a: 'fresh', b: 'fresh', c: 'fresh', d: 'fresh' });
    expect(r.hashedFiles).toBe(1); // the touched file is rehashed once, nothing else
  });

  test('early cutoff: an upstream rerun with identical outputs leaves downstream fresh', async () => {
    await rig.run('all');
    writeFileSync(join(rig.root, 'code', 'a.txt'), 'code of a, reformatted\n');
    const r = await rig.json('all');
    expect(actions(r)).toEqual({ a: 'ran', b: 'fresh', c: 'fresh', d: 'fresh' });
    expect(r.stages[0]!.reasons).toEqual([{ kind: 'code', file: 'code/a.txt', change: 'modified' }]);
  });

  test('switching a parameter back restores outputs from the run cache without rerunning', async () => {
    await rig.run('all');
    const before = rig.read('.ternforge/tiny/lock.json');
    rig.setParams('a', { value: 2 });
    expect(actions(await rig.json('all'))).toEqual({ a: 'ran', b: 'ran', c: 'ran', d: 'ran' });
    rig.setParams('a', { value: 1 });
    const back = await rig.json('all');
    expect(actions(back)).toEqual({ a: 'restored', b: 'restored', c: 'restored', d: 'restored' });
    expect(back.hashedBytes).toBe(0);
    expect(rig.read('.ternforge/tiny/lock.json')).toBe(before);
    expect(JSON.parse(rig.read('.ternforge/tiny/a/outputs/result.json')).value).toBe(1);
    expect(JSON.parse(rig.read('.ternforge/tiny/a/evidence.json'))).toMatchObject({ stage: 'a', keyData: { params: { value: 1 } } });
  });

  test('status --why names the exact change, field by field; exit 1 when stale', async () => {
    await rig.run('all');
    let s = await rig.run('status');
    expect([s.code, s.stdout]).toEqual([0, 'fresh  a\nfresh  b\nfresh  c\nfresh  d\n']);
    rig.setParams('c', { value: { n: 2, deep: { k: 'y', extra: true } } });
    writeFileSync(join(rig.root, 'code', 'd.txt'), 'new code of d\n');
    s = await rig.run('status', '--why');
    expect(s.code).toBe(1);
    expect(s.stdout).toBe(
      [
        'fresh  a',
        'fresh  b',
        'stale  c',
        '       param c.value.deep.extra: (absent) -> true',
        '       param c.value.deep.k: "x" -> "y"',
        '       param c.value.n: 1 -> 2',
        'stale  d',
        '       code code/d.txt: modified',
        '',
      ].join('\n'),
    );
    const j = await rig.json<{ stale: boolean; stages: Array<{ stage: string; fresh: boolean; reasons: unknown[] }> }>('status');
    expect(j.code).toBe(1);
    expect(j.stages[3]).toEqual({ stage: 'd', fresh: false, reasons: [{ kind: 'code', file: 'code/d.txt', change: 'modified' }] });
  });

  test('status before any run, and upstream staleness', async () => {
    const s = await rig.run('status', '--why');
    expect(s.stdout).toBe(['stale  a', '       never run', 'stale  b', '       never run', '       upstream a: stale, runs first', 'stale  c', '       never run', '       upstream b: stale, runs first', 'stale  d', '       never run', '       upstream a: stale, runs first', ''].join('\n'));
  });

  test('--dry-run prints what would run and runs nothing; <stage> runs its upstream closure; --force reruns', async () => {
    const dry = await rig.run('all', '--dry-run');
    expect(dry.code).toBe(0);
    expect(dry.stdout.split('\n')[0]).toBe('would run      a');
    expect(rig.exists('.ternforge/tiny/lock.json')).toBe(false);
    const c = await rig.json('c');
    expect(actions(c)).toEqual({ a: 'ran', b: 'ran', c: 'ran' });
    const forced = await rig.json('b', '--force');
    expect(actions(forced)).toEqual({ a: 'fresh', b: 'ran' });
    expect(forced.stages[1]!.reasons).toEqual([{ kind: 'forced' }]);
  });

  test('top-level links point at the current outputs; gc frees what no lock references', async () => {
    await rig.run('all');
    expect(JSON.parse(readFileSync(join(rig.workdir, 'result'), 'utf8')).stage).toBe('c');
    // dist/<profile> is a real directory of copies of c's stored outputs, without its evidence record.
    const published = join(rig.workdir, 'dist', 'tiny');
    expect(lstatSync(published).isDirectory()).toBe(true);
    expect(readdirSync(published).sort()).toEqual(readdirSync(join(rig.workdir, '.ternforge/tiny/c/outputs')).filter((f) => f !== 'evidence.json').sort());
    const stored = join(rig.workdir, '.ternforge/tiny/c/outputs/result.json');
    expect(statSync(join(published, 'result.json')).ino).not.toBe(statSync(stored).ino);
    expect(readFileSync(join(published, 'result.json'))).toEqual(readFileSync(stored));
    // Editing a file under dist/ leaves the store byte-identical (an append through a hard link would not).
    const before = readFileSync(stored);
    appendFileSync(join(published, 'result.json'), 'x');
    writeFileSync(join(published, 'extra'), 'y');
    expect(readFileSync(stored)).toEqual(before);
    rig.setParams('d', { value: 'other' });
    await rig.run('all');
    const gc = await rig.run('gc');
    expect(gc.code).toBe(0);
    expect(gc.stdout).toMatch(/^removed store\/d\/[0-9a-f]{64}\nremoved runs\/[0-9a-f]{2}\/[0-9a-f]{64}\.json\nfreed [0-9.]+ (B|KiB) \(1 store dirs, 1 run-cache entries\)\n$/);
    expect(actions(await rig.json('all'))).toEqual({ a: 'fresh', b: 'fresh', c: 'fresh', d: 'fresh' });
  });

  test('evidence records name no path of the build machine (workdir, repository, home, temp)', async () => {
    await rig.run('all');
    const records = readdirSync(join(rig.workdir, '.ternforge/tiny')).filter((st) => rig.exists(`.ternforge/tiny/${st}/evidence.json`));
    expect(records.length).toBeGreaterThan(2);
    for (const st of records) {
      const text = rig.read(`.ternforge/tiny/${st}/evidence.json`);
      const { command, log, summary } = JSON.parse(text) as { command: string[]; log: string[]; summary: unknown };
      const shown = JSON.stringify({ command, log, summary });
      for (const host of [rig.workdir, rig.root, rig.base, tmpdir(), homedir(), process.execPath]) expect(shown, `${st}: ${host}`).not.toContain(host);
    }
  });
});
