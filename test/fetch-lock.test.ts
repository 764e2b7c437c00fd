/**
 * Locked hub revisions end to end: the real CLI (`lock`, a run of fetch-model), the real fetch-model
 * stage and Python worker, the real huggingface_hub client, against a local hub (python/tests/hub_server.py
 * --spec). The lock is written, enters the key, holds when the branch moves, is moved by `lock --update`
 * with a diff, and bytes that differ from it are refused.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, beforeEach, describe, expect, test } from 'vitest';

const REPO = join(import.meta.dirname, '..');
const VENV = process.env.TERNFORGE_VENV || join(REPO, '.ternforge', 'venv');
const PYTHON = join(VENV, 'bin', 'python');

/** A one-tensor safetensors file in ASCII bytes (header length 64 = '@' then NULs; F32[2] data 'AAAAAAAA'). */
function safetensors(fill: string): string {
  let header = JSON.stringify({ w: { dtype: 'F32', shape: [2], data_offsets: [0, 8] } });
  header = header.padEnd(64, ' ');
  return '@\0\0\0\0\0\0\0' + header + fill.repeat(8);
}
const CONFIG = '{"model_type": "qwen3_5"}\n';
const files = (fill: string): Record<string, string> => ({ 'config.json': CONFIG, 'tokenizer.json': '{}\n', 'model.safetensors': safetensors(fill), 'README.md': 'card\n' });
const sha256 = (text: string): string => createHash('sha256').update(Buffer.from(text, 'utf8')).digest('hex');

let base: string;
let root: string;
let specPath: string;
let server: ChildProcess;
let endpoint: string;
let env: Record<string, string>;
let n = 0;
let workdir: string;

function setSpec(spec: unknown): void {
  writeFileSync(specPath, JSON.stringify(spec));
}

interface Cli {
  code: number | null;
  stdout: string;
  stderr: string;
}
function cli(...args: string[]): Promise<Cli> {
  const child = spawn(process.execPath, ['--import', 'tsx', join(REPO, 'test', 'fixtures', 'hub-pipeline.ts'), ...args, '--profile', 'hubtest', '--workdir', workdir], { cwd: REPO, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve) => child.once('close', (code) => resolve({ code, stdout, stderr })));
}

const lockFile = (): { stages: Record<string, Record<string, { commit: string; request: Record<string, unknown>; files: Record<string, { size: number; sha256?: string; git_sha1?: string }> }>> } =>
  JSON.parse(readFileSync(join(root, 'profiles', 'hubtest.lock.json'), 'utf8'));
const evidence = (): { key: string; keyData: { pins?: Record<string, { commit: string }> } } => JSON.parse(readFileSync(join(workdir, '.ternforge', 'hubtest', 'fetch-model', 'evidence.json'), 'utf8'));
const sourceRecord = (): { origin: { revision: string; ref: string } } => JSON.parse(readFileSync(join(workdir, '.ternforge', 'hubtest', 'fetch-model', 'outputs', 'source.json'), 'utf8'));

beforeAll(async () => {
  base = mkdtempSync(join(tmpdir(), 'ternforge-hub-lock-'));
  root = join(base, 'root');
  mkdirSync(join(root, 'profiles'), { recursive: true });
  for (const d of ['stages', 'lib', 'python', 'schemas']) symlinkSync(join(REPO, d), join(root, d));
  const tiny = JSON.parse(readFileSync(join(REPO, 'profiles', 'tiny.json'), 'utf8')) as { name: string; description: string; stages: Record<string, unknown> };
  tiny.name = 'hubtest';
  tiny.description = 'fetch-model from a local hub';
  tiny.stages['fetch-model'] = { source: 'hub', repo: 'org/model', revision: 'main' };
  writeFileSync(join(root, 'profiles', 'hubtest.json'), JSON.stringify(tiny, null, 2));
  specPath = join(base, 'hub-spec.json');
  setSpec({ pushes: [] });
  server = spawn(PYTHON, [join(REPO, 'python', 'tests', 'hub_server.py'), '--spec', specPath], { stdio: ['ignore', 'pipe', 'inherit'] });
  endpoint = await new Promise<string>((resolve, reject) => {
    createInterface({ input: server.stdout! }).once('line', (line) => (line.startsWith('HF_ENDPOINT=') ? resolve(line.slice('HF_ENDPOINT='.length)) : reject(new Error(line))));
    server.once('exit', (code) => reject(new Error(`hub_server exited ${code}`)));
  });
});

afterAll(() => {
  server?.kill();
  rmSync(base, { recursive: true, force: true });
});

beforeEach(() => {
  n += 1;
  workdir = join(base, `work-${n}`);
  rmSync(join(root, 'profiles', 'hubtest.lock.json'), { force: true });
  env = { ...(process.env as Record<string, string>), HUB_ROOT: root, HF_ENDPOINT: endpoint, HF_HOME: join(base, `hf-${n}`), HF_HUB_DISABLE_TELEMETRY: '1', TERNFORGE_VENV: VENV };
});

describe('locked hub revisions (fetch-model)', () => {
  test('`lock` writes the lock; the run reads the locked commit, keys on it, and stays fresh when the branch moves; `lock --update` shows the diff', async () => {
    const v1 = files('A');
    setSpec({ pushes: [{ kind: 'model', repo: 'org/model', files: v1 }] });
    const locked = await cli('lock');
    expect(locked.code, locked.stderr).toBe(0);
    const entry = lockFile().stages['fetch-model']!['model']!;
    const c1 = entry.commit;
    expect(locked.stdout).toBe(`fetch-model model (org/model@main): locked at ${c1} (3 files)\n`);
    expect(entry.request).toEqual({ name: 'model', kind: 'model', repo: 'org/model', ref: 'main' });
    expect(entry.files['model.safetensors']).toEqual({ size: 80, sha256: sha256(v1['model.safetensors']!) });
    expect(Object.keys(entry.files).sort()).toEqual(['config.json', 'model.safetensors', 'tokenizer.json']);

    const ran = await cli('fetch-model', '--json');
    expect(ran.code, ran.stderr).toBe(0);
    expect(evidence().keyData.pins?.['model']?.commit).toBe(c1);
    expect(sourceRecord().origin).toMatchObject({ kind: 'hub', ref: 'main', revision: c1 });
    const key1 = evidence().key;

    // The branch moves: nothing reruns, the lock holds.
    setSpec({ pushes: [{ kind: 'model', repo: 'org/model', files: v1 }, { kind: 'model', repo: 'org/model', files: { ...v1, 'model.safetensors': safetensors('B'), 'generation_config.json': '{}\n' } }] });
    const fresh = await cli('fetch-model', '--json');
    expect(JSON.parse(fresh.stdout).stages[0].action).toBe('fresh');

    const upd = await cli('lock', '--update', 'fetch-model');
    expect(upd.code, upd.stderr).toBe(0);
    const c2 = lockFile().stages['fetch-model']!['model']!.commit;
    expect(c2).not.toBe(c1);
    expect(upd.stdout).toBe(`fetch-model model (org/model@main): ${c1} -> ${c2}\n  + generation_config.json\n  ~ model.safetensors\n`);
    const status = await cli('status', '--why');
    expect(status.stdout).toContain(`pin model: ${c1} -> ${c2}`);
    const rerun = await cli('fetch-model', '--json');
    expect(JSON.parse(rerun.stdout).stages[0].action).toBe('ran');
    expect(evidence().key).not.toBe(key1);
    expect(sourceRecord().origin.revision).toBe(c2);
  });

  test('the first run writes the lock itself; bytes that differ from it are refused, naming the file, expected and actual', async () => {
    const v1 = files('C');
    setSpec({ pushes: [{ kind: 'model', repo: 'org/model', files: v1 }] });
    const first = await cli('fetch-model');
    expect(first.code, first.stderr).toBe(0);
    expect(existsSync(join(root, 'profiles', 'hubtest.lock.json'))).toBe(true);
    const c1 = lockFile().stages['fetch-model']!['model']!.commit;
    expect(first.stderr).toContain(`locked    fetch-model model: org/model@main -> ${c1} (profiles/hubtest.lock.json)`);

    // The hub now serves other bytes for the locked commit; a fresh cache must refuse them.
    setSpec({ pushes: [{ kind: 'model', repo: 'org/model', files: v1 }], rewrites: [{ kind: 'model', repo: 'org/model', push: 0, path: 'model.safetensors', text: safetensors('D') }] });
    env.HF_HOME = join(base, `hf-${n}-b`);
    const refused = await cli('fetch-model', '--force');
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('error: stage fetch-model failed: hash-mismatch: org/model@');
    expect(refused.stderr).toContain(`model.safetensors: expected sha256 ${sha256(v1['model.safetensors']!)} (the lock), got ${sha256(safetensors('D'))}`);
    expect(refused.stderr).toContain('  file: model.safetensors');
  });

  test('an unresolvable ref is one error naming the source; nothing is locked', async () => {
    setSpec({ pushes: [{ kind: 'model', repo: 'org/model', files: files('E') }] });
    const tiny = JSON.parse(readFileSync(join(root, 'profiles', 'hubtest.json'), 'utf8')) as { stages: Record<string, unknown> };
    const r = await cli('fetch-model', '--set', 'fetch-model.revision=no-such-branch');
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('error: 1 pinned source cannot be resolved, so profiles/hubtest.lock.json cannot be written');
    expect(r.stderr).toContain("  fetch-model model (org/model@no-such-branch): model org/model has no branch, tag or commit 'no-such-branch'");
    expect(existsSync(join(root, 'profiles', 'hubtest.lock.json'))).toBe(false);
    expect(tiny.stages['fetch-model']).toEqual({ source: 'hub', repo: 'org/model', revision: 'main' });
  });
});
