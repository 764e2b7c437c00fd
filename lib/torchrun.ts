/**
 * quantize.launch (schemas/stages/quantize.schema.json): the worker started under torchrun
 * (`python -m torch.distributed.run`, PyTorch's own launcher and agent; nothing here manages processes), and
 * torchrun's report of a rank that died read back into a failure that names the rank.
 *
 * Each rank runs `python -m ternforge quantize --config <file>` on the same config
 * (python/ternforge/quant/dist.py); rank 0 alone prints events, every rank's log lines start with `[rank N] `.
 */
import type { Failure } from '../engine/failure.ts';
import type { QuantizeParams } from '../schemas/generated/quantize.ts';
import type { WorkerOutcomeFailure } from './failures.ts';

export type Launch = NonNullable<QuantizeParams['launch']>;

/** Processes in all: nproc_per_node x nnodes; 1 without a launch (one process, no torchrun). */
export function worldSize(launch: Launch | undefined): number {
  return launch === undefined ? 1 : (launch.nproc_per_node ?? 1) * (launch.nnodes ?? 1);
}

/**
 * The interpreter arguments before `-m ternforge ...`: torchrun with the launch's processes, no restarts (a
 * rerun of the stage resumes from the distillation's last checkpoint), a standalone rendezvous on one node
 * or the c10d one at rdzv_endpoint, under `rdzvId` (the same on every node: the stage key's prefix).
 */
export function torchrunArgs(launch: Launch, rdzvId: string): string[] {
  const nodes = launch.nnodes ?? 1;
  const meet = launch.rdzv_endpoint === undefined
    ? ['--standalone']
    : ['--rdzv-backend', 'c10d', '--rdzv-endpoint', launch.rdzv_endpoint, '--rdzv-id', rdzvId];
  return ['-m', 'torch.distributed.run', '--nnodes', String(nodes), '--nproc-per-node', String(launch.nproc_per_node ?? 1), '--max-restarts', '0', ...meet];
}

/**
 * The stage key's fields of a launch: what changes the computation (PLAN.md section 4, "What enters the
 * key"). GPTQ's codes and scales are one process's bytes at any world size. Distillation at a set
 * kd.micro_batch takes one process's steps at any world size, up to the rounding of the ranks' gradient sum
 * (its order: the world size, backend, shard), which the key leaves out as it leaves out the CPU thread count
 * and the GPU model; so the distillation's work dir (named by the key) is the same at any rank count, and a
 * rerun resumes its checkpoint there. With kd.micro_batch unset each rank steps batch_size / N rows at once:
 * the world size then sets the micro-batch, and enters the key.
 */
export function launchKey(method: string, launch: Launch | undefined, microBatch: number | undefined): { world_size: number } | undefined {
  const n = worldSize(launch);
  if (n === 1 || method !== 'gptq+kd' || (microBatch ?? 0) > 0) return undefined;
  return { world_size: n };
}

/** How many of a failed rank's own log lines the failure keeps. */
export const RANK_LINES = 12;

/** torchrun's `traceback` line when the worker wrote no error file: it says nothing of the failure. */
const NO_ERROR_FILE = 'To enable traceback see';

/**
 * torchrun's summary of a failed launch (its "Root Cause (first observed failure)" block, then each line
 * `rank : N (local_rank: L)`, `exitcode : C (pid: P)`, `traceback : ...`) as `worker-rank-failed`, with that
 * rank's last `[rank N]` log lines; the failure unchanged when it is not a worker's exit behind torchrun.
 * The cause is torchrun's line for a signal ("Signal 9 (SIGKILL) received by PID ..."), else the rank's last
 * log line (an exception's message).
 */
export function rankFailure(f: Failure | WorkerOutcomeFailure, command: string, size: number): Failure | WorkerOutcomeFailure {
  if (f.reason !== 'worker-failed') return f;
  const root = f.stderrTail.split('Root Cause (first observed failure):')[1];
  if (root === undefined) return f;
  const field = (name: string): string | undefined => new RegExp(`^\\s*${name}\\s*:\\s*(.*)$`, 'm').exec(root)?.[1]?.trim();
  const rank = Number.parseInt(field('rank') ?? '', 10);
  const code = Number.parseInt(field('exitcode') ?? '', 10);
  if (Number.isNaN(rank)) return f;
  const tag = `[rank ${rank}] `;
  const own = f.stderrTail.split('\n').filter((l) => l.startsWith(tag)).map((l) => l.slice(tag.length));
  const said = field('traceback');
  const cause = said !== undefined && !said.startsWith(NO_ERROR_FILE) ? said : (own.at(-1)?.trim() ?? 'unknown');
  return {
    reason: 'worker-rank-failed',
    command,
    rank,
    worldSize: size,
    exitCode: Number.isNaN(code) ? null : code,
    cause,
    rankLog: own.slice(-RANK_LINES),
  };
}
