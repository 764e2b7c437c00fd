/**
 * The preflight's decisions: what python/ternforge/preflight.py measured on this machine (the facts), the
 * host's memory and disk, and the profile, turned into one go/no-go row per check and the projected wall time
 * of every long phase. Every threshold and every assumption of the projection is named here, once.
 *
 * Extrapolation: the mini-runs ran the real width at two depths (one and two periods of the layer pattern);
 * a figure y measured at depths d1 < d2 is taken to the model's depth L along the line through both,
 * y(L) = y1 + (y2 - y1) / (d2 - d1) * (L - d1), with the slope held at >= 0 (noise on a small model can make it
 * negative). That separates the per-layer cost from what does not grow with depth (embedding, head, Python).
 */
import type { PreflightFacts, Depth, MiniFailure, ResolvedQuantize } from '../../schemas/generated/preflight-result.ts';

export type Status = 'go' | 'no-go' | 'warn' | 'skip';

export interface CheckRow {
  check: string;
  status: Status;
  measured: string;
  needed: string;
  detail: string;
}

export interface PhaseRow {
  phase: string;
  seconds: number | null;
  basis: string;
}

export interface HostFacts {
  mem_available_bytes: number;
  mem_total_bytes: number;
  disk_free_bytes: number;
  /** The directory whose filesystem holds the store and the checkpoints. */
  disk_path: string;
}

export interface DecideInput {
  profile: string;
  quality: { seq_len?: number; sequences?: number } | undefined;
  /** The oldest driver each CUDA stack runs on (lib/submission/cuda.ts), null for a CPU stack. */
  workersMinDriver: string | null;
  servingMinDriver: string | null;
  /** The model checkpoint's bytes where the hub listed them (the fetch-model source), else null. */
  checkpointBytes: number | null;
  /** The calibration sources' bytes as the hub listed them (0 for package or local sources). */
  calibrationBytes: number;
  /** Whether the profile vendors the CUDA serving wheels (vendor-wheels.cuda_major set). */
  servingWheels: boolean;
  host: HostFacts;
  facts: PreflightFacts;
  /** The grader's burst as the profile's smoke-serve section states it (requests at once, max_tokens, deadline). */
  burst?: { concurrency: number; max_tokens: number; deadline_s: number };
  /** What the eval stage will ask (command.ts evalPlan). */
  eval?: { requests: number; concurrency: number; maxTokens: number; models: number; realSplits: string[] };
  /** Why the facts are partial: the preflight of a bench/gpu-check.sh run was cut off or failed (a no-go row). */
  incomplete?: string;
  /** bench/gpu-builtin.py's result, where the facts came from bench/gpu-check.sh. */
  builtin?: { gpu: string | null; requests: number; tokens_per_request: number; wall_s: number; tok_s: number; step_ms_at_full_batch: { mean: number; p50: number; max: number } } | { error: string };
}

export interface Decision {
  verdict: 'go' | 'no-go';
  checks: CheckRow[];
  phases: PhaseRow[];
  total_seconds: number;
  unmeasured: string[];
}

/** The CUDA caching allocator's fragmentation on top of live tensors (PLAN.md section 3: typically 10-20%). */
export const ALLOCATOR_MARGIN = 0.15;
/** Host memory kept free beside what the run holds (the OS, the page cache of the shards being read). */
export const HOST_RESERVE_BYTES = 4e9;
/** The serving wheels vendor-wheels downloads for the CUDA stack (python/requirements-serve-cuda.txt: about 5.2 GB). */
export const SERVING_WHEELS_BYTES = 5.2e9;
/** Decode steps of a self-written request (chatdata.SELF_REQUEST_TOKENS; python/tests/test_preflight.py holds the two equal). */
export const SELF_REQUEST_TOKENS = 64;
/** Forward passes of one layer over the calibration tokens in sequential GPTQ: one per group capture and one to propagate (PLAN.md section 2). */
export const GPTQ_PASSES = 5;
/** PLAN.md section 5's total for qwen3.5-4b on one GPU, for comparison. */
export const PLAN_TOTAL = 'PLAN.md section 5: 3.5-6 h for qwen3.5-4b on one GPU';

const GB = 1e9;
const gb = (b: number): string => (b >= GB ? `${(b / GB).toFixed(1)} GB` : `${(b / 1e6).toFixed(b >= 1e7 ? 0 : 1)} MB`);

export function duration(s: number | null): string {
  if (s === null) return '-';
  if (s < 90) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  if (s < 5400) return `${(s / 60).toFixed(0)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

/** Compare dotted driver versions numerically: -1, 0, 1. */
export function compareVersions(a: string, b: string): number {
  const pa = a.split('.').map(Number);
  const pb = b.split('.').map(Number);
  for (let i = 0; i < Math.max(pa.length, pb.length); i++) {
    const d = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (d !== 0) return Math.sign(d);
  }
  return 0;
}

/** y at `layers` on the line through two depths' figures (slope >= 0). */
export function atDepth(depths: readonly Depth[], layers: number, pick: (d: Depth) => number | undefined): number | null {
  const [a, b] = depths;
  const ya = a !== undefined ? pick(a) : undefined;
  const yb = b !== undefined ? pick(b) : undefined;
  if (a === undefined || b === undefined || ya === undefined || yb === undefined) return null;
  const slope = Math.max(0, (yb - ya) / (b.layers - a.layers));
  return ya + slope * (layers - a.layers);
}

function latentBytes(q: ResolvedQuantize): number {
  return q.kd.latent_dtype === 'bfloat16' ? 2 : 4;
}

/** What a distillation checkpoint holds: U and its two Adam moments in the latent dtype, the scales and theirs in fp32. */
export function checkpointBytesOf(m: NonNullable<PreflightFacts['model']>, q: ResolvedQuantize): number {
  const ternary = Object.entries(m.layers).reduce((n, [kind, count]) => n + (m.eligible_per_layer[kind] ?? 0) * count, 0);
  return 3 * ternary * latentBytes(q) + 3 * (ternary / q.group_size) * 4;
}

/** What each mini-run is, as its failure row names it. */
function miniNeeds(phase: MiniFailure['phase'], q: ResolvedQuantize): string {
  switch (phase) {
    case 'build': return 'the teacher built at the real width';
    case 'forward': return `a forward of ${q.calibration.batch_size} x ${q.calibration.seq_len} tokens`;
    case 'generate': return "greedy generation at the teacher's answer batch";
    case 'distill': return `a distillation step at micro-batch ${q.kd.micro_batch} x ${q.kd.seq_len}, ${q.kd.latent_dtype} latents`;
    case 'gptq': return `GPTQ of one layer of each kind at calibration batch ${q.calibration.batch_size} x ${q.calibration.seq_len}`;
  }
}

export function decide(i: DecideInput): Decision {
  const { facts } = i;
  const q = facts.quantize; // as the worker parsed it: every default filled in
  const checks: CheckRow[] = [];
  const row = (check: string, status: Status, measured: string, needed: string, detail = ''): void => void checks.push({ check, status, measured, needed, detail });
  const cuda = q.device.startsWith('cuda');
  const t = facts.torch;
  const m = facts.model;
  const distills = q.method === 'gptq+kd';
  const gptq = q.method === 'gptq' || q.method === 'gptq+kd';
  const linearLayers = m === null ? 1 : (m.layers['linear_attention'] ?? 0); // unknown: as for Qwen3.5

  if (i.incomplete !== undefined) row('preflight', 'no-go', 'cut off', 'the whole preflight', i.incomplete);
  // the device and its drivers
  if (!cuda) row('device', 'go', `cpu (torch ${t.version})`, `quantize.device ${q.device}`);
  else if (!t.cuda_available) row('device', 'no-go', `no CUDA device (torch ${t.version}, CUDA build ${t.cuda_build ?? 'none'})`, `quantize.device ${q.device}`, 'torch.cuda.is_available() is False: wrong machine, no driver, or a CPU build of torch in the workers\' environment');
  else row('device', 'go', t.devices.map((d) => `${d.name} (${gb(d.total_bytes)}, sm ${d.capability})`).join(', '), `quantize.device ${q.device}`);
  for (const [stack, min] of [['workers', i.workersMinDriver], ['serving', i.servingMinDriver]] as const) {
    if (!cuda || !t.cuda_available) continue;
    if (min === null) row(`driver (${stack})`, 'skip', t.driver ?? 'unknown', 'no CUDA stack');
    else if (t.driver === null) row(`driver (${stack})`, 'warn', 'unknown (no nvidia-smi)', `>= ${min}`);
    else row(`driver (${stack})`, compareVersions(t.driver, min) >= 0 ? 'go' : 'no-go', t.driver, `>= ${min}`, stack === 'workers' ? `torch ${t.version} built for CUDA ${t.cuda_build}` : 'the submission\'s vLLM stack (CUDA 12)');
  }

  // the hub
  for (const h of facts.hub) {
    const what = `${h.kind} ${h.repo}@${(h.commit ?? h.ref).slice(0, 12)}`;
    row(`hub ${h.name}`, h.ok ? 'go' : 'no-go', h.ok ? `${what}: ${h.files} file(s), ${gb(h.bytes)}${h.gated ? `, gated (${h.gated}), token ok` : ''}` : what, 'readable', h.error ?? '');
  }

  // the kernels
  const k = facts.kernels;
  if (linearLayers === 0) row('kernels', 'skip', 'no Gated DeltaNet layers', '-');
  else if (!cuda) row('kernels', 'go', `PyTorch delta rule (${k.fast_path ? 'fla importable: it would be taken on CPU tensors' : 'the CPU path'})`, 'any on CPU', k.fast_path ? 'flash-linear-attention is installed in a CPU environment: its Triton kernels cannot run CPU tensors' : '');
  else if (!k.fast_path) row('kernels', q.allow_slow_kernels ? 'warn' : 'no-go', `transformers' PyTorch delta rule (flash-linear-attention ${k.distributions['flash-linear-attention'] ?? 'not installed'})`, 'flash-linear-attention (fla.ops.gated_delta_rule)', 'about 5x slower on the Gated DeltaNet layers (PLAN.md section 0); the CUDA profiles install python/requirements-cuda.lock.txt');
  else if (k.run_error !== null) row('kernels', 'no-go', `fla ${k.distributions['flash-linear-attention']}: forward and backward failed`, 'one forward and backward at the real width', k.run_error);
  else if (k.run !== null) row('kernels', 'go', `fla ${k.distributions['flash-linear-attention']}: forward+backward of ${k.run.tokens} tokens x ${k.run.heads} heads in ${duration(k.run.seconds)}`, 'flash-linear-attention');
  else row('kernels', 'warn', `fla ${k.distributions['flash-linear-attention']} selected, not run`, 'one forward and backward', 'no CUDA device to run it on');
  const tc = facts.toolchain;
  const needsCc = cuda && linearLayers > 0;
  row('C toolchain', tc.ok ? (needsCc ? 'go' : 'skip') : needsCc ? 'no-go' : 'skip', tc.ok ? `${tc.cc} with ${tc.python_include}/Python.h` : 'missing', needsCc ? "a C compiler and Python.h (Triton builds a launcher for each of fla's kernels)" : 'not on CPU',
    tc.error ?? '');

  // who writes the teacher's chat transcripts (kd.chat_engine)
  const answers = q.kd.chat_prompts + q.kd.chat_self_prompts;
  const ce = facts.chat_engine;
  if (distills && answers > 0) {
    const needed = `kd.chat_engine ${ce.asked}`;
    if (ce.engine === null) row('chat transcripts', 'no-go', 'vLLM cannot write them here', needed, `${ce.error ?? ''}; set quantize.kd.chat_engine=auto to fall back to generate`);
    else if (ce.engine === 'vllm') row('chat transcripts', 'go', `vLLM${ce.vllm === null ? '' : ` ${ce.vllm}`} (offline LLM)`, needed, ce.reason ?? '');
    else row('chat transcripts', ce.asked === 'auto' && cuda ? 'warn' : 'go', "transformers' generate", needed, ce.asked === 'transformers' ? '' : `not vLLM: ${ce.reason ?? ''}`);
  }

  if (m === null) {
    row('model', 'no-go', 'its config.json could not be read', "the model's config.json", facts.model_error ?? '');
    return { verdict: 'no-go', checks, phases: [], total_seconds: 0, unmeasured: ["every memory, disk and time figure (they need the model's shape)"] };
  }

  // memory
  const depths = facts.mini?.depths ?? [];
  const failures = facts.mini?.failures ?? [];
  const L = m.layer_count;
  const steady = atDepth(depths, L, (d) => d.distill?.steady_bytes);
  const peak = atDepth(depths, L, (d) => d.distill?.peak_bytes);
  const ckpt = checkpointBytesOf(m, q);
  if (distills && peak !== null && steady !== null) {
    const need = Math.max(peak, steady);
    if (cuda && t.cuda_available) {
      const total = t.devices[0]?.total_bytes ?? 0;
      const withMargin = need * (1 + ALLOCATOR_MARGIN);
      row('gpu memory (distillation)', withMargin <= total ? 'go' : need <= total ? 'warn' : 'no-go', gb(total), `${gb(need)} + ${ALLOCATOR_MARGIN * 100}% allocator margin = ${gb(withMargin)}`,
        `micro-batch ${q.kd.micro_batch} x ${q.kd.seq_len}, ${q.kd.latent_dtype} latents, fitted to ${L} layers from ${depths.map((d) => d.layers).join(' and ')}` +
          (need > total && q.kd.latent_dtype !== 'bfloat16' ? '; set quantize.kd.latent_dtype=bfloat16 (PLAN.md section 3)' : ''));
    }
    const hostNeed = (cuda ? ckpt : need + ckpt) + HOST_RESERVE_BYTES;
    row('host memory', hostNeed <= i.host.mem_available_bytes ? 'go' : 'no-go', `${gb(i.host.mem_available_bytes)} available of ${gb(i.host.mem_total_bytes)}`, gb(hostNeed),
      `${cuda ? '' : `the run (${gb(need)}) + `}the checkpoint's copy in host memory (${gb(ckpt)}) + ${gb(HOST_RESERVE_BYTES)} reserve`);
  } else if (distills && !failures.some((f) => f.phase === 'distill' || f.phase === 'build')) {
    row('memory', 'skip', 'not measured', '-', 'the distillation mini-run did not run');
  }

  // the mini-runs that raised: what the run itself would meet, found in minutes instead of hours in
  for (const f of failures) {
    const oom = f.kind === 'out_of_memory';
    const check = f.phase === 'distill' && oom ? `${cuda ? 'gpu' : 'host'} memory (distillation)` : `mini-run ${f.phase}`;
    const hint = oom && f.phase === 'distill'
      ? `; lower quantize.kd.micro_batch (${q.kd.micro_batch} now, it must divide kd.batch_size ${q.kd.batch_size})${q.kd.latent_dtype !== 'bfloat16' ? ' or set quantize.kd.latent_dtype=bfloat16 (PLAN.md section 3)' : ''}`
      : oom && f.phase === 'gptq' ? `; lower quantize.calibration.batch_size (${q.calibration.batch_size} now)` : '';
    row(check, 'no-go', `${oom ? 'out of memory' : 'failed'}${f.layers !== null ? ` at ${f.layers} layers` : ''}`, miniNeeds(f.phase, q), f.error + hint);
  }

  // disk: the hub cache and the store copy of the checkpoint, the interchange, two checkpoints for a moment, calibration, wheels
  const model = i.checkpointBytes ?? m.total_params * 2;
  const disk = 3 * model + (distills ? 2 * ckpt : 0) + i.calibrationBytes + (i.servingWheels ? SERVING_WHEELS_BYTES : 0);
  row('disk', disk <= i.host.disk_free_bytes ? 'go' : 'no-go', `${gb(i.host.disk_free_bytes)} free at ${i.host.disk_path}`, gb(disk),
    `checkpoint x3 (hub cache, store, interchange: ${gb(model)} each)${distills ? ` + 2 distillation checkpoints (${gb(ckpt)} each, one renamed over the other)` : ''} + calibration ${gb(i.calibrationBytes)}${i.servingWheels ? ` + serving wheels ${gb(SERVING_WHEELS_BYTES)}` : ''}`);

  // the built-in engine's decode of the grader's burst (the fallback when vLLM cannot start)
  if (i.builtin !== undefined && 'error' in i.builtin) {
    row('built-in engine burst', 'no-go', 'no result', i.burst !== undefined ? `${i.burst.concurrency} x ${i.burst.max_tokens} tokens in ${i.burst.deadline_s} s` : '-', i.builtin.error);
  } else if (i.builtin !== undefined && i.burst !== undefined) {
    const b = i.builtin;
    const scaled = b.wall_s * (i.burst.max_tokens / b.tokens_per_request);
    const measured = `${b.requests} x ${b.tokens_per_request} tokens in ${duration(b.wall_s)} on ${b.gpu ?? 'cpu'} (step ${b.step_ms_at_full_batch.mean.toFixed(1)} ms mean)`;
    const exact = b.tokens_per_request >= i.burst.max_tokens && b.requests >= i.burst.concurrency;
    row('built-in engine burst', scaled <= i.burst.deadline_s ? 'go' : 'warn', measured, `${i.burst.concurrency} x ${i.burst.max_tokens} tokens in ${i.burst.deadline_s} s`,
      exact ? '' : `${duration(scaled)} for ${i.burst.max_tokens} tokens, extrapolated per step from ${b.tokens_per_request} (a lower bound: full attention grows with the context)${b.requests < i.burst.concurrency ? `; measured at ${b.requests} requests` : ''}`);
  }

  // the projection
  const phases: PhaseRow[] = [];
  const unmeasured = ['fetch-model, fetch-calib and fetch-eval downloads (network)', 'pack, audit, vendor-wheels, emit, smoke-serve'];
  const calTokens = q.calibration.sequences * q.calibration.seq_len;
  const fwd = atDepth(depths, L, (d) => (d.forward !== undefined ? d.forward.seconds / d.forward.tokens : undefined));
  const step = atDepth(depths, L, (d) => d.generate?.seconds_per_step);
  const micro = atDepth(depths, L, (d) => d.distill?.seconds);
  const kd = q.kd;
  if (gptq || q.method === 'twn') {
    phases.push({ phase: 'float budget plan', seconds: !q.allocation.sensitivity ? 0 : fwd === null ? null : fwd * calTokens, basis: `one forward over ${calTokens} calibration tokens` });
  }
  if (distills) {
    // the batch the mini-run measured at is chatdata's answer batch
    const batch = depths[0]?.generate?.batch ?? 1;
    const steps = Math.ceil(answers / batch) * kd.chat_max_new + Math.ceil(kd.chat_self_prompts / batch) * SELF_REQUEST_TOKENS;
    // The mini-runs do not time vLLM's offline LLM (a vLLM start at the real width alone is minutes): generate's step stands in for it.
    const by = ce.engine === 'vllm'
      ? "by vLLM, projected at generate's step as measured (vLLM is not timed here; it wrote smol's transcripts 2.9x faster than generate on a CPU, bench/results/vllm-transcripts.json)"
      : 'by generate, each step as measured at a short context: a lower bound';
    if (answers > 0) phases.push({ phase: 'teacher transcripts', seconds: step === null ? null : step * steps, basis: `${answers} answers of up to ${kd.chat_max_new} tokens at batch ${batch}: ${steps} decode steps ${by}` });
  }
  if (gptq) {
    const g = facts.mini?.gptq ?? null;
    let seconds: number | null = null;
    if (g !== null) {
      seconds = 0;
      for (const [kind, count] of Object.entries(m.layers)) {
        const r = g.kinds[kind];
        if (r === undefined) continue;
        seconds += count * (r.quant_seconds + GPTQ_PASSES * r.capture_seconds * (calTokens / g.tokens));
      }
    }
    phases.push({ phase: 'sequential GPTQ', seconds, basis: g === null ? 'not measured' : `fasterquant of one layer per kind plus ${GPTQ_PASSES} layer passes over ${calTokens} tokens, times ${L} layers` });
  }
  if (distills && kd.block_steps > 0) {
    const perLayerToken = depths.length === 2 && depths[0]!.distill && depths[1]!.distill
      ? Math.max(0, (depths[1]!.distill.seconds - depths[0]!.distill.seconds) / (depths[1]!.layers - depths[0]!.layers)) / depths[0]!.distill.tokens : null;
    const tokens = kd.block_batch * kd.seq_len;
    phases.push({ phase: 'Block-AP', seconds: perLayerToken === null ? null : L * kd.block_steps * tokens * perLayerToken, basis: `${kd.block_steps} steps of ${tokens} tokens per layer at the distillation step's per-layer cost` });
  }
  if (distills) {
    const micros = Math.ceil(kd.batch_size / kd.micro_batch);
    phases.push({ phase: 'distillation', seconds: micro === null ? null : kd.steps * micros * micro, basis: `${kd.steps} steps x ${micros} micro-batch(es), each as measured` });
  }
  if (i.quality !== undefined) {
    const tokens = (i.quality.sequences ?? 0) * (i.quality.seq_len ?? 0);
    phases.push({ phase: 'quality', seconds: fwd === null ? null : 2 * tokens * fwd, basis: `the float and the packed model over ${tokens} held-out tokens` });
  }
  if (i.eval !== undefined) {
    const e = i.eval;
    const batch = depths[0]?.generate?.batch ?? null;
    const rounds = Math.ceil(e.requests / e.concurrency);
    // every reply to max_tokens, each decode step as the teacher's at its batch: an upper bound in tokens, on
    // the built-in engine's speed (vLLM, which serves the submission on a GPU, decodes faster)
    phases.push({
      phase: 'eval (lm-eval)',
      seconds: step === null ? null : e.models * rounds * e.maxTokens * step,
      basis: `${e.models} models x ${e.requests} requests (${e.realSplits.length > 0 ? `real splits: ${e.realSplits.join(', ')}` : 'the project-written stand-ins'}), ${e.concurrency} at a time, every reply to ${e.maxTokens} tokens at the measured decode step${batch !== null && batch !== e.concurrency ? ` (batch ${batch})` : ''}: an upper bound on decoding (server start-up and lm-eval's own time not included)`,
    });
  }
  const total = phases.reduce((n, p) => n + (p.seconds ?? 0), 0);
  if (phases.some((p) => p.seconds === null)) unmeasured.push(...phases.filter((p) => p.seconds === null).map((p) => p.phase));
  const verdict = checks.some((c) => c.status === 'no-go') ? 'no-go' : 'go';
  return { verdict, checks, phases, total_seconds: total, unmeasured };
}

/** The table a person reads: one line per check, then the projection. */
export function formatDecision(profile: string, d: Decision): string {
  const w = Math.max(...d.checks.map((c) => c.check.length), 8);
  const lines = [`preflight ${profile}: ${d.verdict.toUpperCase()}`, ''];
  for (const c of d.checks) {
    lines.push(`${c.status.padEnd(6)} ${c.check.padEnd(w)}  ${c.measured}  (needs ${c.needed})`);
    if (c.detail !== '') lines.push(`${' '.repeat(8 + w)}${c.detail}`);
  }
  lines.push('', 'projected wall time');
  const pw = Math.max(...d.phases.map((p) => p.phase.length), 8);
  for (const p of d.phases) lines.push(`  ${p.phase.padEnd(pw)}  ${duration(p.seconds).padStart(8)}  ${p.basis}`);
  lines.push(`  ${'total'.padEnd(pw)}  ${duration(d.total_seconds).padStart(8)}  measured phases only (${PLAN_TOTAL})`);
  lines.push(`  not measured: ${d.unmeasured.join('; ')}`);
  return lines.join('\n') + '\n';
}
