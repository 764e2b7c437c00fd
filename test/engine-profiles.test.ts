/**
 * Two profiles in one workdir: a run-cache hit across profiles (same key, same bytes) leaves a record
 * that names the profile it was restored into, with the profile that ran it; a stage that names the
 * profile in its outputs (namesProfile, like report) is never restored from another profile. The real
 * CLI on the toy graph a -> b (b names the profile), profiles tiny and twin with equal sections.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, test } from 'vitest';
import type { EvidenceRecord } from '../schemas/generated/evidence-record.ts';
import { actions, Rig } from './fixtures/engine/rig.ts';

let rig: Rig;
beforeEach(() => {
  rig = new Rig('profiles');
  const tiny = JSON.parse(readFileSync(join(rig.root, 'profiles', 'tiny.json'), 'utf8')) as { name: string };
  for (const name of ['twin', 'third']) writeFileSync(join(rig.root, 'profiles', `${name}.json`), JSON.stringify({ ...tiny, name }));
});
afterEach(() => rig.cleanup());

const record = (profile: string, stage: string): EvidenceRecord => JSON.parse(rig.read(`.ternforge/${profile}/${stage}/evidence.json`)) as EvidenceRecord;

describe('two profiles in one workdir', () => {
  for (const [first, second] of [['tiny', 'twin'], ['twin', 'tiny']] as const) {
    test(`${first} then ${second}: a restored record names ${second} and where it came from; b runs for each`, async () => {
      const one = await rig.json('all', '--profile', first);
      expect(actions(one)).toEqual({ a: 'ran', b: 'ran' });
      const two = await rig.json('all', '--profile', second);
      expect(two.code).toBe(0);
      expect(actions(two)).toEqual({ a: 'restored', b: 'ran' });
      const restored = record(second, 'a');
      expect(restored.profile).toBe(second);
      expect(restored.restoredFrom).toMatchObject({ profile: first });
      expect(Date.parse(restored.restoredFrom!.restoredAt)).toBeGreaterThanOrEqual(Date.parse(restored.endedAt));
      // Same key, same bytes: everything but the profile and restoredFrom is the producing run's record.
      const { profile: _p, restoredFrom: _r, ...rest } = restored;
      const { profile: _q, ...ran } = record(first, 'a');
      expect(rest).toEqual(ran);
      expect(record(first, 'a').profile).toBe(first);
      expect('restoredFrom' in record(first, 'a')).toBe(false);
      // b holds the profile's name in its key, so each profile has its own run of it.
      expect(record(first, 'b').keyData.facts).toEqual({ profile: first });
      expect(record(second, 'b').keyData.facts).toEqual({ profile: second });
      expect(record(second, 'b').key).not.toBe(record(first, 'b').key);
      // Each profile is fresh afterwards and its status names nothing stale.
      for (const p of [first, second]) expect(actions(await rig.json('all', '--profile', p))).toEqual({ a: 'fresh', b: 'fresh' });
    });
  }

  test('a record restored twice names the profile that ran it', async () => {
    await rig.run('all', '--profile', 'tiny');
    await rig.run('all', '--profile', 'twin');
    await rig.run('all', '--profile', 'twin', '--force', 'b'); // the cache entry of a stays tiny's run
    const third = await rig.json('all', '--profile', 'third');
    expect(actions(third)).toEqual({ a: 'restored', b: 'ran' });
    expect(record('third', 'a').restoredFrom?.profile).toBe('tiny');
  });
});
