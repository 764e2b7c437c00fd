/**
 * The engine's `pins` hook on a toy graph a -> b (real CLI): stage a pins sources resolved from a JSON
 * "hub" ($TOY_HUB); the lock profiles/<profile>.lock.json is written on the first run, enters a's key,
 * holds when the branch moves, changes the key when `lock --update` moves it; a stage without pin
 * requests keeps the key it had without the hook.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, test } from 'vitest';
import { canonicalJson, sha256 } from '../engine/digest.ts';
import { computeKeyData, stageKey, type StageKeyData } from '../engine/key.ts';
import { FileHasher } from '../engine/hash.ts';
import { engineSchemaSet } from '../engine/json-io.ts';
import type { StageDef } from '../engine/types.ts';
import { actions, Rig } from './fixtures/engine/rig.ts';

const C1 = '1'.repeat(40);
const C2 = '2'.repeat(40);
const C3 = '3'.repeat(40);

let rig: Rig;
let hubFile: string;
const setHub = (hub: Record<string, Record<string, string>>): void => writeFileSync(hubFile, JSON.stringify(hub));
const lockPath = (): string => join(rig.root, 'profiles', 'tiny.lock.json');
const evidence = (stage: string): { key: string; keyData: StageKeyData } => JSON.parse(rig.read(`.ternforge/tiny/${stage}/evidence.json`)) as { key: string; keyData: StageKeyData };

beforeEach(() => {
  rig = new Rig('pins');
  hubFile = join(rig.base, 'hub.json');
  rig.env.TOY_HUB = hubFile;
  setHub({ 'org/model': { main: C1, v1: C1 }, 'org/data': { main: C3 } });
});
afterEach(() => rig.cleanup());

describe('pins', () => {
  test('a stage without pin requests: no lock written, no pins field, the key is the hash of the record without it', async () => {
    const r = await rig.json('all');
    expect(actions(r)).toEqual({ a: 'ran', b: 'ran' });
    expect(existsSync(lockPath())).toBe(false);
    const a = evidence('a');
    expect('pins' in a.keyData).toBe(false);
    expect(a.key).toBe(sha256(canonicalJson(a.keyData)));
  });

  test('computeKeyData leaves `pins` out unless given, and a lock entry changes the key', async () => {
    const def: StageDef<unknown> = { name: 'x', summary: 'x', code: [], schema: 'none', run: async () => ({ ok: true, value: {} }) };
    const hasher = new FileHasher(join(rig.base, 'hash-cache.json'), engineSchemaSet());
    const base = { def, params: { a: 1 }, profile: 'p', root: rig.root, cacheDir: join(rig.base, 'cache'), hasher, upstream: {}, toolVersions: {} };
    const plain = await computeKeyData(base);
    const withPins = await computeKeyData({ ...base, pins: { m: { request: { name: 'm', kind: 'toy', repo: 'r', ref: 'main' }, commit: C1, files: {} } } });
    await hasher.close();
    expect(plain.ok && withPins.ok).toBe(true);
    if (!plain.ok || !withPins.ok) return;
    expect(Object.keys(plain.value).sort()).toEqual(['code', 'facts', 'format', 'inputs', 'params', 'stage', 'tools', 'upstream']);
    expect(stageKey(withPins.value)).not.toBe(stageKey(plain.value));
  });

  test('the first run resolves and writes the lock; the lock enters the key; a moved branch changes nothing until `lock --update`', async () => {
    rig.setParams('a', { value: 1, pins: [{ name: 'model', repo: 'org/model', ref: 'main' }] });
    const first = await rig.json('all');
    expect(actions(first)).toEqual({ a: 'ran', b: 'ran' });
    expect(first.stderr).toContain(`locked    a model: org/model@main -> ${C1} (profiles/tiny.lock.json)`);
    const lock = JSON.parse(readFileSync(lockPath(), 'utf8')) as { schema: number; profile: string; stages: Record<string, Record<string, { commit: string }>> };
    expect(lock).toMatchObject({ schema: 1, profile: 'tiny', stages: { a: { model: { commit: C1, request: { name: 'model', kind: 'toy', repo: 'org/model', ref: 'main' } } } } });
    expect(evidence('a').keyData.pins?.['model']?.commit).toBe(C1);
    expect(JSON.parse(rig.read('.ternforge/tiny/a/outputs/result.json')).pins).toEqual({ model: C1 });

    // The branch moves on the hub: the lock holds, nothing reruns.
    setHub({ 'org/model': { main: C2 }, 'org/data': { main: C3 } });
    expect(actions(await rig.json('all'))).toEqual({ a: 'fresh', b: 'fresh' });

    // `lock --update` re-resolves and prints the diff; status names the pin; the next run reruns a.
    const upd = await rig.run('lock', '--update');
    expect([upd.code, upd.stdout]).toEqual([0, `a model (org/model@main): ${C1} -> ${C2}\n  + ${C2.slice(0, 8)}.txt\n  - ${C1.slice(0, 8)}.txt\n`]);
    const st = await rig.run('status', '--why');
    expect(st.stdout).toContain(`stale  a\n       pin model: ${C1} -> ${C2}`);
    const again = await rig.json('all');
    expect(actions(again)).toEqual({ a: 'ran', b: 'ran' });
    expect(JSON.parse(rig.read('.ternforge/tiny/a/outputs/result.json')).pins).toEqual({ model: C2 });
    // Nothing moved: `lock --update` says so and leaves the file alone.
    const text = readFileSync(lockPath(), 'utf8');
    expect((await rig.run('lock', '--update', 'a')).stdout).toBe(`a model (org/model@main): unchanged at ${C2}\n`);
    expect(readFileSync(lockPath(), 'utf8')).toBe(text);
  });

  test('a changed request in the profile is re-resolved on the next run; a dropped source leaves the lock', async () => {
    rig.setParams('a', { pins: [{ name: 'model', repo: 'org/model', ref: 'main' }, { name: 'data', repo: 'org/data', ref: 'main' }] });
    await rig.run('all');
    setHub({ 'org/model': { main: C2, v1: C1 }, 'org/data': { main: C3 } });
    rig.setParams('a', { pins: [{ name: 'model', repo: 'org/model', ref: 'v1' }] });
    const dry = await rig.run('all', '--dry-run');
    expect(dry.stdout).toContain('pin model: not in the lock yet');
    const r = await rig.json('all');
    expect(actions(r)).toEqual({ a: 'ran', b: 'ran' });
    const lock = JSON.parse(readFileSync(lockPath(), 'utf8')) as { stages: { a: Record<string, { commit: string; request: { ref: string } }> } };
    expect(Object.keys(lock.stages.a)).toEqual(['model']);
    expect(lock.stages.a.model).toMatchObject({ commit: C1, request: { ref: 'v1' } });
  });

  test('every unresolvable source of every stage is listed in one error before anything runs', async () => {
    rig.setParams('a', { pins: [{ name: 'model', repo: 'org/model', ref: 'main' }, { name: 'gone', repo: 'org/gone', ref: 'main' }, { name: 'tag', repo: 'org/data', ref: 'v9' }] });
    rig.setParams('b', { value: 'b1', pins: [{ name: 'other', repo: 'org/other', ref: 'main' }] });
    const r = await rig.json('all');
    expect(r.code).toBe(1);
    expect(r.stages).toEqual([]);
    expect(r.stderr).toContain(
      'error: 3 pinned sources cannot be resolved, so profiles/tiny.lock.json cannot be written (fix the refs in the profile, or run where the hub is reachable):\n' +
        '  a gone (org/gone@main): no such repository\n' +
        '  a tag (org/data@v9): no ref v9\n' +
        '  b other (org/other@main): no such repository\n',
    );
    expect(existsSync(lockPath())).toBe(false);
    const l = await rig.run('lock');
    expect(l.code).toBe(1);
    expect(l.stderr).toContain('error: 3 pinned sources cannot be resolved');
  });
});
