/**
 * quantize.launch (lib/torchrun.ts): the command line torchrun gets, what of a launch enters the key, and
 * the real CLI on tiny: GPTQ under 2 gloo ranks keeps one process's key and output digest and records the
 * world; a rank killed mid-run fails the stage with that rank named.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { launchKey, rankFailure, torchrunArgs, worldSize } from '../lib/torchrun.ts';
import type { EvidenceRecord } from '../schemas/generated/evidence-record.ts';

const root = join(import.meta.dirname, '..');
const venv = process.env.TERNFORGE_VENV || join(root, '.ternforge', 'venv');
const scratch: string[] = [];
afterAll(() => {
  for (const d of scratch) rmSync(d, { recursive: true, force: true });
});

describe('the launch', () => {
  test('torchrun gets the processes, no restarts, and a standalone or c10d rendezvous', () => {
    expect(torchrunArgs({ nproc_per_node: 2 }, 'k')).toEqual(['-m', 'torch.distributed.run', '--nnodes', '1', '--nproc-per-node', '2', '--max-restarts', '0', '--standalone']);
    expect(torchrunArgs({ nproc_per_node: 8, nnodes: 2, rdzv_endpoint: 'node0:29400' }, 'abc')).toEqual(
      ['-m', 'torch.distributed.run', '--nnodes', '2', '--nproc-per-node', '8', '--max-restarts', '0', '--rdzv-backend', 'c10d', '--rdzv-endpoint', 'node0:29400', '--rdzv-id', 'abc']);
    expect([worldSize(undefined), worldSize({}), worldSize({ nproc_per_node: 4, nnodes: 2 })]).toEqual([1, 1, 8]);
  });

  test('the key holds the world size only where it sets the distillation\'s micro-batch', () => {
    expect(launchKey('gptq', { nproc_per_node: 8 }, undefined)).toBeUndefined();
    expect(launchKey('gptq+kd', { nproc_per_node: 1 }, undefined)).toBeUndefined();
    expect(launchKey('gptq+kd', { nproc_per_node: 4, nnodes: 2, rdzv_endpoint: 'h:1' }, undefined)).toEqual({ world_size: 8 });
    expect(launchKey('gptq+kd', { nproc_per_node: 2, backend: 'gloo', shard: 'fsdp' }, 0)).toEqual({ world_size: 2 });
    expect(launchKey('gptq+kd', { nproc_per_node: 2, backend: 'gloo', shard: 'fsdp' }, 2)).toBeUndefined();
  });

  test('an exception on a rank: the cause is its last log line (torchrun has no error file to quote)', () => {
    // The end of a real torchrun summary (torch 2.13) after rank 1 raised.
    const stderrTail = [
      '[rank 1] Traceback (most recent call last):',
      '[rank 1] ValueError: gptq needs calibration batches (fetch-calib\'s calibration role), at least one for each of the 4 ranks: 2',
      'Root Cause (first observed failure):',
      '[0]:',
      '  time      : 2026-12-07_12:23:16',
      '  host      : localhost',
      '  rank      : 1 (local_rank: 1)',
      '  exitcode  : 1 (pid: 10203) ',
      '  error_file: <N/A>',
      '  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html',
    ].join('\n');
    const f = rankFailure({ reason: 'worker-failed', stage: 'quantize', command: 'c', exitCode: 1, signal: null, stderrTail }, 'quantize', 4);
    expect(f).toEqual({ reason: 'worker-rank-failed', command: 'quantize', rank: 1, worldSize: 4, exitCode: 1,
      cause: 'ValueError: gptq needs calibration batches (fetch-calib\'s calibration role), at least one for each of the 4 ranks: 2',
      rankLog: ['Traceback (most recent call last):', 'ValueError: gptq needs calibration batches (fetch-calib\'s calibration role), at least one for each of the 4 ranks: 2'] });
  });

  test('a worker failure without torchrun\'s summary stays what it was', () => {
    const f = { reason: 'worker-failed' as const, stage: 'quantize', command: 'c', exitCode: 1, signal: null, stderrTail: 'Traceback ...' };
    expect(rankFailure(f, 'quantize', 2)).toBe(f);
  });
});

function cli(workdir: string, env: Record<string, string>, ...args: string[]): { code: number | null; out: string } {
  const r = spawnSync(process.execPath, ['--import', 'tsx', join(root, 'pipeline.ts'), ...args, '--workdir', workdir], { cwd: root, encoding: 'utf8', env: { ...process.env, TERNFORGE_VENV: venv, ...env }, timeout: 590_000, maxBuffer: 64 * 2 ** 20 });
  return { code: r.status, out: `${r.stdout}\n${r.stderr}` };
}

/** quantize's entry of `status --json` under these --set options. */
function quantizeStatus(workdir: string, ...sets: string[]): { fresh: boolean; reasons: Array<{ kind: string; path?: string; to?: unknown }> } {
  const r = spawnSync(process.execPath, ['--import', 'tsx', join(root, 'pipeline.ts'), 'status', '--json', ...sets, '--workdir', workdir], { cwd: root, encoding: 'utf8', env: { ...process.env, TERNFORGE_VENV: venv } });
  const stages = (JSON.parse(r.stdout) as { stages: Array<{ stage: string; fresh: boolean; reasons: Array<{ kind: string; path?: string; to?: unknown }> }> }).stages;
  const q = stages.find((e) => e.stage === 'quantize')!;
  return { fresh: q.fresh, reasons: q.reasons };
}

const record = (workdir: string): EvidenceRecord => JSON.parse(readFileSync(join(workdir, '.ternforge', 'tiny', 'quantize', 'evidence.json'), 'utf8')) as EvidenceRecord;

/** The pid of a process whose environment holds RANK=<rank> and whose command line runs the ternforge worker. */
function rankPid(rank: number): number | undefined {
  for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
      const env = readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');
      if (cmd.includes('ternforge\0quantize') && env.includes(`RANK=${rank}`) && env.includes('TERNFORGE_LAUNCH_TEST=1')) return Number(pid);
    } catch {
      // gone, or not ours
    }
  }
  return undefined;
}

describe('quantize under torchrun on tiny', () => {
  // One CPU thread in every process: torchrun's default per rank, and the one-process run's here (a CPU
  // matmul's rounding of the report's gptq_rel_err may depend on the thread count; the codes do not).
  const env = { OMP_NUM_THREADS: '1', TERNFORGE_LAUNCH_TEST: '1' };
  const gptq = ['--set', 'quantize.method=gptq'];
  const two = ['--set', 'quantize.launch={"nproc_per_node":2,"backend":"gloo"}'];

  test('GPTQ under 2 ranks: the same key and output digest as one process, the world in the record', () => {
    const workdir = mkdtempSync(join(tmpdir(), 'ternforge-launch-'));
    scratch.push(workdir);
    const one = cli(workdir, env, 'quantize', ...gptq);
    expect(one.code, one.out.slice(-4000)).toBe(0);
    const first = record(workdir);
    expect((first.summary as Record<string, unknown> | undefined)?.['distributed']).toBeUndefined();
    expect(quantizeStatus(workdir, ...gptq, ...two)).toEqual({ fresh: true, reasons: [] });
    // gptq+kd with kd.micro_batch unset (tiny's): the world size sets the micro-batch and enters the key (launchKey).
    // With it set, the launch leaves the key as it is.
    const kd = quantizeStatus(workdir, ...two).reasons.filter((r) => r.path?.startsWith('quantize.launch'));
    expect(kd).toEqual([{ kind: 'param', path: 'quantize.launch', to: { world_size: 2 } }]);
    expect(quantizeStatus(workdir, ...two, '--set', 'quantize.kd.micro_batch=2').reasons.filter((r) => r.path?.startsWith('quantize.launch'))).toEqual([]);
    const ran = cli(workdir, env, 'quantize', '--force', ...gptq, ...two);
    expect(ran.code, ran.out.slice(-4000)).toBe(0);
    expect(ran.out).toContain('-m torch.distributed.run --nnodes 1 --nproc-per-node 2 --max-restarts 0 --standalone -m ternforge quantize');
    const second = record(workdir);
    expect(second.outputDigest).toBe(first.outputDigest);
    const d = (second.summary as Record<string, unknown> | undefined)?.['distributed'] as { world_size: number; backend: string; ranks: Array<{ rank: number; gptq_s: number }> };
    expect([d.world_size, d.backend, d.ranks.map((r) => r.rank)]).toEqual([2, 'gloo', [0, 1]]);

    // A rank that dies: torchrun stops the other and reports it; the stage's error names it.
    const child = spawn(process.execPath, ['--import', 'tsx', join(root, 'pipeline.ts'), 'quantize', '--force', ...gptq, ...two, '--workdir', workdir], { cwd: root, env: { ...process.env, TERNFORGE_VENV: venv, ...env } });
    let out = '';
    child.stdout.on('data', (b: Buffer) => (out += b.toString()));
    child.stderr.on('data', (b: Buffer) => (out += b.toString()));
    const done = new Promise<number | null>((resolve) => child.on('close', resolve));
    return (async () => {
      let pid: number | undefined;
      for (let i = 0; i < 600 && pid === undefined; i++) {
        await new Promise((r) => setTimeout(r, 100));
        if (out.includes('[rank 1] quantize:')) pid = rankPid(1);
      }
      expect(pid, out.slice(-3000)).toBeDefined();
      process.kill(pid!, 'SIGKILL');
      expect(await done).toBe(1);
      expect(out).toMatch(/rank 1 of 2 of the quantize worker failed first \(exit code -9: Signal 9 \(SIGKILL\) received by PID \d+\); torchrun stopped the other ranks/);
      expect(existsSync(join(workdir, '.ternforge', 'tiny', 'quantize', 'evidence.json'))).toBe(true);
      expect(record(workdir).outputDigest).toBe(first.outputDigest); // the failed run left the stage as it was
    })();
  }, 900_000);
});
