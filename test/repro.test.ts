/**
 * Reproducibility: two clean builds of tiny from this checkout, in two fresh workdirs, up to `audit`
 * ($TERNFORGE_REPRO_TARGET to go further, e.g. `report`). The weights and the manifest are byte-identical;
 * every other output and record is identical or equal after masking only the declared volatile fields
 * (lib/report/repro.ts), and the comparison names the mask for each one.
 */
import { copyFileSync, cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { compareBuilds, describeComparison, type Build, type ReproEntry } from '../lib/report/repro.ts';
import { cleanBuild } from '../scripts/verify-repro.ts';

const target = process.env.TERNFORGE_REPRO_TARGET ?? 'audit';
const builds: Build[] = [];
let entries: ReproEntry[] = [];

beforeAll(() => {
  for (const label of ['a', 'b']) {
    const b = cleanBuild('tiny', target, label);
    builds.push({ workdir: b.workdir, profile: 'tiny' });
    if (!b.ok) throw new Error(`build ${label} failed:\n${b.output}`);
  }
  entries = compareBuilds(builds[0]!, builds[1]!);
  process.stdout.write(`${describeComparison(entries)}\n`);
}, 1_200_000);
afterAll(() => {
  for (const b of builds) rmSync(b.workdir, { recursive: true, force: true });
});

describe(`two clean builds of tiny up to ${target}`, () => {
  test('weights and manifest are byte-identical', () => {
    const packed = entries.filter((e) => e.stage === 'pack');
    expect(packed.map((e) => e.path)).toContain('quantization_manifest.json');
    expect(packed.some((e) => e.path.startsWith('weights/'))).toBe(true);
    for (const e of packed.filter((x) => x.path !== 'evidence.json')) expect({ path: e.path, status: e.status }).toEqual({ path: e.path, status: 'identical' });
    // And the interchange the packer read.
    for (const e of entries.filter((x) => x.stage === 'quantize' && x.path.endsWith('.safetensors'))) expect(e.status).toBe('identical');
    const digest = (b: Build): string => (JSON.parse(readFileSync(join(b.workdir, '.ternforge', 'tiny', 'pack', 'evidence.json'), 'utf8')) as { outputDigest: string }).outputDigest;
    expect(digest(builds[0]!)).toBe(digest(builds[1]!));
  });

  test('nothing else differs beyond the declared volatile fields', () => {
    expect(entries.filter((e) => e.status !== 'identical' && e.status !== 'volatile')).toEqual([]);
    // Records always differ in their timestamps and host, and the comparison says so.
    const rec = entries.find((e) => e.stage === 'pack' && e.path === 'evidence.json')!;
    expect(rec.status).toBe('volatile');
    expect(rec.detail).toContain('field startedAt');
  });

  test('the comparison catches a real difference: one changed byte in the manifest', () => {
    // A third "build": a's records and outputs, except pack's manifest with one value changed.
    const a = builds[0]!;
    const c = mkdtempSync(join(tmpdir(), 'ternforge-repro-c-'));
    builds.push({ workdir: c, profile: 'tiny' });
    for (const s of readdirSync(join(a.workdir, '.ternforge', 'tiny'))) {
      const from = join(a.workdir, '.ternforge', 'tiny', s);
      if (!existsSync(join(from, 'evidence.json'))) continue;
      const to = join(c, '.ternforge', 'tiny', s);
      mkdirSync(to, { recursive: true });
      copyFileSync(join(from, 'evidence.json'), join(to, 'evidence.json'));
      if (!existsSync(join(from, 'outputs'))) continue;
      if (s !== 'pack') symlinkSync(join(from, 'outputs'), join(to, 'outputs'));
      else {
        cpSync(join(from, 'outputs'), join(to, 'outputs'), { recursive: true, dereference: true });
        const m = join(to, 'outputs', 'quantization_manifest.json');
        writeFileSync(m, readFileSync(m, 'utf8').replace('"group_size": 32', '"group_size": 64'));
      }
    }
    const found = compareBuilds(a, { workdir: c, profile: 'tiny' }).filter((e) => e.status === 'differs');
    expect(found.map((e) => `${e.stage}/${e.path}`)).toEqual(['pack/quantization_manifest.json']);
    expect(found[0]!.detail).toContain('group_size');
  });
});
