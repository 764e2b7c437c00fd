/**
 * Two shipped profiles in one workdir, in both orders: tiny and smol share vendor-wheels (equal sections,
 * so equal keys: a run-cache hit across profiles is right). Whichever profile ran it, the other's record
 * names its own profile and says where the bytes came from; tiny's report and `verify` pass either way.
 * smol's own report is not built here (its quantize takes tens of minutes on CPU); its restored stage is
 * checked through its record and `status`. Both start from a hard-linked copy of the suite's shared tiny build
 * (global-setup.ts); for "smol first" the copy loses tiny's vendor-wheels (its place, its lock entry, its store
 * dir and its run-cache entry), so smol runs that stage and tiny's stages downstream of it stay fresh only if
 * the bytes tiny restores from smol's run are the bytes tiny built.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import type { EvidenceRecord } from '../schemas/generated/evidence-record.ts';

const root = join(import.meta.dirname, '..');
const venv = process.env.TERNFORGE_VENV || join(root, '.ternforge', 'venv');
const scratch: string[] = [];
afterAll(() => {
  for (const d of scratch) rmSync(d, { recursive: true, force: true });
});

function cli(workdir: string, ...args: string[]): { code: number | null; out: string } {
  const r = spawnSync(process.execPath, ['--import', 'tsx', join(root, 'pipeline.ts'), ...args, '--workdir', workdir], { cwd: root, encoding: 'utf8', env: { ...process.env, TERNFORGE_VENV: venv }, timeout: 590_000, maxBuffer: 64 * 2 ** 20 });
  return { code: r.status, out: `${r.stdout}\n${r.stderr}` };
}

const record = (workdir: string, profile: string, stage: string): EvidenceRecord => JSON.parse(readFileSync(join(workdir, '.ternforge', profile, stage, 'evidence.json'), 'utf8')) as EvidenceRecord;

/** Every record under .ternforge/<profile>/ names that profile. */
function recordsName(workdir: string, profile: string): Record<string, string> {
  const dir = join(workdir, '.ternforge', profile);
  const out: Record<string, string> = {};
  for (const s of readdirSync(dir)) if (existsSync(join(dir, s, 'evidence.json'))) out[s] = record(workdir, profile, s).profile;
  return out;
}

/** A workdir holding a hard-linked copy of the shared tiny build (the engine replaces files by rename). */
function copyOfSharedBuild(): string {
  const shared = process.env.TERNFORGE_TINY_BUILD;
  expect(shared, 'the global setup builds tiny once').toBeDefined();
  const workdir = mkdtempSync(join(tmpdir(), 'ternforge-two-profiles-'));
  scratch.push(workdir);
  const cp = spawnSync('cp', ['-al', join(shared!, '.ternforge'), join(workdir, '.ternforge')], { encoding: 'utf8' });
  expect(cp.status, cp.stderr).toBe(0);
  return workdir;
}

/** Everything of `stage`'s in `profile` of the workdir gone, as if it had never run there (lock rewritten by rename). */
function forget(workdir: string, profile: string, stage: string): void {
  const ws = join(workdir, '.ternforge');
  rmSync(join(ws, profile, stage), { recursive: true });
  rmSync(join(ws, 'store', stage), { recursive: true });
  for (const prefix of readdirSync(join(ws, 'runs'))) {
    for (const f of readdirSync(join(ws, 'runs', prefix))) {
      const entry = JSON.parse(readFileSync(join(ws, 'runs', prefix, f), 'utf8')) as { stage: string };
      if (entry.stage === stage) rmSync(join(ws, 'runs', prefix, f));
    }
  }
  const lockPath = join(ws, profile, 'lock.json');
  const lock = JSON.parse(readFileSync(lockPath, 'utf8')) as { stages: Record<string, unknown> };
  expect(lock.stages[stage]).toBeDefined();
  delete lock.stages[stage];
  writeFileSync(`${lockPath}.tmp`, JSON.stringify(lock, null, 2));
  renameSync(`${lockPath}.tmp`, lockPath);
}

/** tiny's report (its stdout and stderr) after it was built and `verify` passed on it. */
function tinyReportVerifies(workdir: string): string {
  const built = cli(workdir, 'report', '--profile', 'tiny');
  expect(built.code, built.out.slice(-4000)).toBe(0);
  const verified = cli(workdir, 'verify', join(workdir, '.ternforge', 'tiny', 'report', 'outputs'));
  expect(verified.code, verified.out.slice(-4000)).toBe(0);
  const names = recordsName(workdir, 'tiny');
  expect(Object.keys(names)).toContain('report');
  expect(new Set(Object.values(names))).toEqual(new Set(['tiny']));
  return built.out;
}

describe('tiny and smol in one workdir', () => {
  test('smol first: tiny restores vendor-wheels from smol\'s run, names itself, and its report and verify pass', () => {
    const workdir = copyOfSharedBuild();
    forget(workdir, 'tiny', 'vendor-wheels');
    const smol = cli(workdir, 'vendor-wheels', '--profile', 'smol', '--json');
    expect(smol.code, smol.out.slice(-4000)).toBe(0);
    expect(smol.out).toMatch(/"stage":\s*"vendor-wheels",\s*"action":\s*"ran"/);
    // the same bytes as tiny's own: nothing downstream of vendor-wheels reruns
    expect(tinyReportVerifies(workdir)).toMatch(/^tiny: ran 0, restored 1, fresh \d+/m);
    expect(record(workdir, 'tiny', 'vendor-wheels').restoredFrom?.profile).toBe('smol');
    expect(record(workdir, 'tiny', 'vendor-wheels').outputDigest).toBe(record(workdir, 'smol', 'vendor-wheels').outputDigest);
    // The report copies the records it gathered (the fresh one holds the copy's records: run it again): the
    // one in the submission names tiny too.
    const again = cli(workdir, 'report', '--profile', 'tiny', '--force');
    expect(again.out).toMatch(/^tiny: ran 1, restored 0, fresh \d+/m);
    const shipped = JSON.parse(readFileSync(join(workdir, '.ternforge', 'tiny', 'report', 'outputs', 'evidence', 'records', 'vendor-wheels.json'), 'utf8')) as EvidenceRecord;
    expect({ profile: shipped.profile, from: shipped.restoredFrom?.profile }).toEqual({ profile: 'tiny', from: 'smol' });
  }, 900_000);

  test('tiny first: smol restores vendor-wheels from tiny\'s run and names itself; tiny stays fresh and verified', () => {
    const workdir = copyOfSharedBuild();
    const smol = cli(workdir, 'vendor-wheels', '--profile', 'smol', '--json');
    expect(smol.code, smol.out.slice(-4000)).toBe(0);
    expect(smol.out).toMatch(/"stage":\s*"vendor-wheels",\s*"action":\s*"restored"/);
    const restored = record(workdir, 'smol', 'vendor-wheels');
    expect({ profile: restored.profile, from: restored.restoredFrom?.profile }).toEqual({ profile: 'smol', from: 'tiny' });
    const status = cli(workdir, 'status', '--profile', 'smol', '--why');
    expect(status.out).toMatch(/^fresh\s+vendor-wheels$/m);
    tinyReportVerifies(workdir);
    expect('restoredFrom' in record(workdir, 'tiny', 'vendor-wheels')).toBe(false);
  }, 900_000);
});
