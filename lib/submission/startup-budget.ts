/**
 * The start-up budget on paper: each phase from serve.sh's first line to the first answered request, for
 * one submission, from the rates measured on the build machine (bench/startup-rates.json `measured`,
 * written by bench/startup_rates.py) and, for what needs a GPU, estimates with their source and arithmetic
 * (`estimated`). emit writes it as evidence/startup-budget.json and .md; the README carries the table for
 * qwen3.5-4b.
 *
 * Measured rates are taken per CPU second: the build machine is shared (its load average is recorded), so
 * its wall clock overstates the time; one CPU second is the time on one dedicated core, with no credit for
 * more cores (uv's install, the only parallel phase, runs faster on the grader's cores than budgeted).
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { StartupBudget } from '../../schemas/generated/startup-budget.ts';
import { contract, isExemptName } from '../contract.ts';

export type StartupFacts = StartupBudget['facts'];
export type BudgetPhase = StartupBudget['phases'][number];

/** One estimated phase: a fixed time, or a size over a rate. */
export interface Estimate {
  seconds?: number;
  /** GB per second, applied to `scales_with`. */
  gb_per_s?: number;
  scales_with?: 'bf16_bytes' | 'shard_bytes';
  source: string;
  arithmetic: string;
}

/** bench/startup-rates.json. */
export interface StartupRates {
  measured: {
    machine: { cpus: number; load_average_before: number[]; load_average_after?: number[] };
    sha256: { gb_per_cpu_s: number; gb_per_wall_s: number; code: string };
    dequantize: { threads_1: { weights_per_cpu_s: number; weights_per_wall_s: number }; code: string };
    write_bf16: { gb_per_cpu_s: number; gb_per_wall_s: number; code: string };
    install: { wheels: number; wheel_bytes: number; installed_bytes: number; installed_files: number; wall_s: number; cpu_s: number; wheel_gb_per_cpu_s: number; label: string; python: string };
  };
  estimated: Record<string, Estimate>;
}

/** Gate 4's limit, seconds from serve.sh starting to /health answering (schemas/contract.json). */
export function startupLimitS(): number {
  return contract().gates.startup_limit_s;
}
export const REQUIRED_SPARE = 0.25;
export const RATES_FILE = 'bench/startup-rates.json';

/** The phases of the vLLM path, in order, each an `estimated` key of the rates file. */
export const VLLM_ESTIMATES = ['processes_start', 'toolchain_check', 'dequantize_gpu', 'vllm_weight_load', 'profile_and_triton', 'warm_up'] as const;
/** What --enforce-eager (engine_vllm.py vllm_command) leaves out; the notes give the budget with them. */
export const COMPILED_ONLY = ['torch_compile', 'cuda_graph_capture'] as const;
/** The rates file's estimate of the built-in engine's start on the GPU, behind the reserve. */
export const BUILTIN_FALLBACK = 'builtin_fallback';

const GB = 1e9;
const r1 = (x: number): number => Math.round(x * 10) / 10;
const gb = (b: number): string => `${(b / GB).toFixed(3)} GB`;

export function readRates(root: string): StartupRates {
  return JSON.parse(readFileSync(join(root, RATES_FILE), 'utf8')) as StartupRates;
}

/** The budget of a submission with these facts. Throws when the rates file lacks an estimate it needs. */
export function startupBudget(facts: StartupFacts, rates: StartupRates): StartupBudget {
  const m = rates.measured;
  const phases: BudgetPhase[] = [];
  const installRate = m.install.wheel_bytes / m.install.cpu_s;
  phases.push({
    phase: 'install (uv, offline, into .packages)',
    seconds: facts.wheel_bytes / installRate,
    basis: 'measured',
    arithmetic: `${gb(facts.wheel_bytes)} of wheels / ${(installRate / GB).toFixed(4)} GB per CPU-s (${gb(m.install.wheel_bytes)} installed in ${m.install.cpu_s} CPU-s, ${m.install.wall_s} s wall, here)`,
  });
  phases.push({
    phase: 'sha256 of the shards',
    seconds: facts.shard_bytes / (m.sha256.gb_per_cpu_s * GB),
    basis: 'measured',
    arithmetic: `${gb(facts.shard_bytes)} / ${m.sha256.gb_per_cpu_s} GB per CPU-s`,
  });
  const est = (key: string): Estimate => {
    const e = rates.estimated[key];
    if (e === undefined) throw new Error(`${RATES_FILE} has no estimated.${key}`);
    return e;
  };
  const estimated = (key: string, label: string): void => {
    const e = est(key);
    let seconds: number;
    let arithmetic = e.arithmetic;
    if (e.seconds !== undefined) seconds = e.seconds;
    else if (e.gb_per_s !== undefined && e.scales_with !== undefined) {
      seconds = facts[e.scales_with] / (e.gb_per_s * GB);
      arithmetic = `${gb(facts[e.scales_with])} / ${e.gb_per_s} GB/s; ${e.arithmetic}`;
    } else throw new Error(`${RATES_FILE} estimated.${key}: needs seconds, or gb_per_s and scales_with`);
    phases.push({ phase: label, seconds, basis: 'estimated', arithmetic: `${arithmetic} (source: ${e.source})` });
  };
  if (facts.engine === 'vllm') {
    estimated('processes_start', 'processes start (controller, vLLM import probe, vLLM API server and engine core)');
    estimated('toolchain_check', "C toolchain check for Triton (worst case: the shipped Zig, a cold cache)");
    estimated('dequantize_gpu', 'dequantize on the GPU (export-bf16 --device cuda)');
    phases.push({
      phase: 'write the bf16 checkpoint (/dev/shm)',
      seconds: facts.bf16_bytes / (m.write_bf16.gb_per_cpu_s * GB),
      basis: 'measured',
      arithmetic: `${gb(facts.bf16_bytes)} / ${m.write_bf16.gb_per_cpu_s} GB per CPU-s`,
    });
    estimated('vllm_weight_load', 'vLLM loads the bf16 checkpoint');
    estimated('profile_and_triton', "vLLM's profiling and warm-up run (Triton JIT, cold cache), KV cache");
    estimated('warm_up', 'warm-up, /health 200');
    const fallback = est(BUILTIN_FALLBACK);
    const reserve = contract().startup.builtin_reserve_s;
    phases.push({
      phase: 'reserve: the built-in engine loads and warms up, should vLLM fail late',
      seconds: reserve,
      basis: 'reserve',
      arithmetic: `schemas/contract.json startup.builtin_reserve_s, kept back from vLLM's share by the server: ${(reserve / (fallback.seconds ?? reserve)).toFixed(1)} x the ${fallback.seconds} s estimate of the built-in engine's start on the GPU (${fallback.arithmetic}; source: ${fallback.source})`,
    });
  } else {
    phases.push({
      phase: 'dequantize on the CPU (built-in engine)',
      seconds: facts.dequantized_weights / m.dequantize.threads_1.weights_per_cpu_s,
      basis: 'measured',
      arithmetic: `${(facts.dequantized_weights / 1e6).toFixed(1)} M weights / ${(m.dequantize.threads_1.weights_per_cpu_s / 1e6).toFixed(1)} M per CPU-s (one thread)`,
    });
  }
  for (const p of phases) p.seconds = r1(p.seconds);
  const total = r1(phases.reduce((s, p) => s + p.seconds, 0));
  const LIMIT_S = startupLimitS();
  const spare = r1(LIMIT_S - total);
  const notes = [
    `Measured phases: rates from ${RATES_FILE} (bench/startup_rates.py, the server's own code), per CPU second on a ${m.machine.cpus}-CPU build machine whose load average was ${m.machine.load_average_before.join('/')}; wall time there was longer because the machine was shared.`,
  ];
  if (facts.engine === 'vllm') {
    notes.push(`If the GPU export fails and the bf16 weights are dequantized on the CPU instead: ${r1(facts.dequantized_weights / m.dequantize.threads_1.weights_per_cpu_s)} s more (${(m.dequantize.threads_1.weights_per_cpu_s / 1e6).toFixed(1)} M weights per CPU-s, one thread).`);
    const compiled = COMPILED_ONLY.map((k) => est(k).seconds ?? 0).reduce((a, x) => a + x, 0);
    const compiledSpare = LIMIT_S - total - compiled;
    notes.push(`vLLM runs with --enforce-eager: torch.compile (${est('torch_compile').seconds} s) and CUDA graph capture (${est('cuda_graph_capture').seconds} s) are not in the total. With them it would be ${r1(total + compiled)} s, ${r1(compiledSpare)} s (${Math.round((compiledSpare / LIMIT_S) * 100)}%) to spare, under the ${REQUIRED_SPARE * 100}% required.`);
    notes.push("Triton builds a C launcher for every kernel (a C compiler and Python.h): the server checks the box's own toolchain first (0.1 s), else uses the submission's (ziglang's clang and the vendored CPython headers in toolchain/); the toolchain phase is the shipped one's cold first compile.");
  } else {
    notes.push('The built-in engine: model build and first step are not in this budget (measured by smoke-serve on the CPU profiles).');
  }
  return {
    format: 'ternforge-startup-budget/1',
    limit_s: LIMIT_S,
    required_spare: REQUIRED_SPARE,
    facts,
    phases,
    total_s: total,
    spare_s: spare,
    spare_fraction: Math.round((spare / LIMIT_S) * 1000) / 1000,
    within: spare / LIMIT_S >= REQUIRED_SPARE,
    rates: { file: RATES_FILE, machine: m.machine },
    notes,
  };
}

/** The budget as a Markdown table (README, evidence/startup-budget.md). */
export function budgetMarkdown(b: StartupBudget): string {
  const lines = ['| phase | seconds | basis | arithmetic |', '|---|---:|---|---|'];
  for (const p of b.phases) lines.push(`| ${p.phase} | ${p.seconds.toFixed(1)} | ${p.basis} | ${p.arithmetic.replace(/\|/g, '\\|')} |`);
  lines.push(`| **total** | **${b.total_s.toFixed(1)}** | | of ${b.limit_s} s: ${b.spare_s.toFixed(1)} s (${(b.spare_fraction * 100).toFixed(0)}%) to spare, ${(b.required_spare * 100).toFixed(0)}% required |`);
  return lines.join('\n') + '\n';
}

interface ManifestLike {
  shards: { file: string; size: number }[];
  tensors: Record<string, { encoding: string; shape: number[]; exempt?: boolean }>;
}
interface WheelsLike {
  wheels: { name: string; size: number }[];
}

/** The facts of a submission from its manifest and wheels record. */
export function submissionFacts(manifest: ManifestLike, wheels: WheelsLike): StartupFacts {
  const numel = (s: readonly number[]): number => s.reduce((a, b) => a * b, 1);
  // As the server's loader: exempt when flagged or under a vision / MTP prefix (never loaded, never written).
  const exempt = (name: string, t: { exempt?: boolean }): boolean => t.exempt === true || isExemptName(name);
  const tensors = Object.entries(manifest.tensors).filter(([n, t]) => !exempt(n, t)).map(([, t]) => t);
  return {
    wheel_bytes: wheels.wheels.filter((w) => w.name !== 'uv').reduce((s, w) => s + w.size, 0),
    shard_bytes: manifest.shards.reduce((s, x) => s + x.size, 0),
    dequantized_weights: tensors.filter((t) => t.encoding === 'packed_2bit').reduce((s, t) => s + numel(t.shape), 0),
    bf16_bytes: tensors.reduce((s, t) => s + 2 * numel(t.shape), 0),
    engine: wheels.wheels.some((w) => w.name === 'vllm') ? 'vllm' : 'builtin',
  };
}

/** The facts of the submission in `dir` (emitted: quantization_manifest.json and evidence/wheels.json). */
export function factsOfDir(dir: string, manifestFile: string, wheelsFile: string): StartupFacts | null {
  if (!existsSync(join(dir, manifestFile)) || !existsSync(join(dir, wheelsFile))) return null;
  return submissionFacts(JSON.parse(readFileSync(join(dir, manifestFile), 'utf8')) as ManifestLike, JSON.parse(readFileSync(join(dir, wheelsFile), 'utf8')) as WheelsLike);
}
