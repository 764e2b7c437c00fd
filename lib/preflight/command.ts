/**
 * `tsx pipeline.ts preflight --profile <p> [--no-mini] [--gen-tokens N] [--gptq-tokens N] [--facts <file>] [--json]`: before a long
 * run commits the day, check and measure this machine for the profile and print one go/no-go table.
 *
 * It builds the workers' environment first (python-env; and fetch-model where the source is local or generated,
 * which costs seconds), then runs the worker command `preflight` (python/ternforge/preflight.py: the device,
 * driver, kernels, hub access for every pinned source without downloading, the model's shape, and timed
 * mini-runs of the profile's phases at the real width), adds the host's memory and disk, and decides
 * (lib/preflight/decide.ts). The report is written to `<workdir>/.ternforge/<profile>/preflight.json`
 * (schemas/preflight-report.schema.json). With `--facts <file>` it measures nothing and decides from what
 * bench/gpu-check.sh measured on a lent GPU. Exit 0 on go, 1 on no-go, 2 on bad usage.
 */
import { mkdirSync, readdirSync, readFileSync, statfsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import type { CommandContext, ExtraCommand } from '../../engine/cli.ts';
import { formatFailure } from '../../engine/format-failure.ts';
import { writeFileAtomicSync } from '../../engine/fs-atomic.ts';
import { Session } from '../../engine/session.ts';
import { runWorker } from '../../engine/worker.ts';
import type { EvalParams } from '../../schemas/generated/eval.ts';
import type { FetchCalibParams } from '../../schemas/generated/fetch-calib.ts';
import type { FetchEvalParams } from '../../schemas/generated/fetch-eval.ts';
import { BENCHMARK_ITEMS } from '../eval/harness-data.ts';
import type { Benchmark } from '../eval/score.ts';
import type { FetchModelParams } from '../../schemas/generated/fetch-model.ts';
import type { PreflightReport } from '../../schemas/generated/preflight-report.ts';
import type { PythonEnvParams } from '../../schemas/generated/python-env.ts';
import type { QuantizeParams } from '../../schemas/generated/quantize.ts';
import type { VendorWheelsParams } from '../../schemas/generated/vendor-wheels.ts';
import { cudaOf, MIN_DRIVER_BY_MAJOR } from '../submission/cuda.ts';
import { parseCompiled } from '../submission/wheels.ts';
import { formatStageFailure } from '../failures.ts';
import { checkWorkerOutcome } from '../worker-results.ts';
import { decide, formatDecision, type DecideInput, type HostFacts } from './decide.ts';
import type { PreflightFacts } from '../../schemas/generated/preflight-result.ts';
import { DEFAULT_REQUIREMENTS } from '../../engine/venv.ts';
import { engineSchemaSet } from '../../engine/json-io.ts';

const USAGE = 'usage: preflight [--profile <p>] [--no-mini] [--gen-tokens N] [--gptq-tokens N] [--facts <gpu-check.json>] [--json]';
export const REPORT_FILE = 'preflight.json';
export const REPORT_SCHEMA = 'preflight-report.schema.json';

/**
 * What the eval stage will ask (DESIGN.md, Evaluation with lm-evaluation-harness): each fetch-eval source's
 * published item count, and for a benchmark without one the project-written questions of the eval sets;
 * twice (the submission, then the float model), `concurrency` at a time, up to `maxTokens` each.
 */
export function evalPlan(root: string, p: EvalParams, fe: FetchEvalParams | undefined): NonNullable<DecideInput['eval']> {
  const real = new Set((fe?.sources ?? []).map((s) => s.benchmark));
  let requests = [...real].reduce((n, b) => n + BENCHMARK_ITEMS[b], 0);
  const files = p.sets ?? readdirSync(join(root, 'data/eval')).filter((f) => f.endsWith('.json')).map((f) => `data/eval/${f}`);
  for (const f of files) {
    const set = JSON.parse(readFileSync(join(root, f), 'utf8')) as { benchmark: Benchmark; questions: unknown[] };
    if (!real.has(set.benchmark)) requests += set.questions.length;
  }
  if (p.limit !== undefined) requests = Math.min(requests, p.limit * 4);
  return { requests, concurrency: p.concurrency ?? 16, maxTokens: p.maxTokens ?? 4096, models: 2, realSplits: [...real].sort() };
}

/** The mini-runs a method's phases need. */
export function phasesFor(q: QuantizeParams, quality: boolean, evaluates = false): string[] {
  const out = new Set<string>();
  // the eval's wall time is projected from the decode step at the eval's concurrency
  if (evaluates) out.add('generate');
  if (quality || q.method !== 'absmean') out.add('forward');
  if (q.method === 'gptq' || q.method === 'gptq+kd') out.add('gptq');
  if (q.method === 'gptq+kd') {
    out.add('distill');
    if ((q.kd?.chat_prompts ?? 0) + (q.kd?.chat_self_prompts ?? 0) > 0) out.add('generate');
  }
  if (q.method === 'none') out.delete('forward');
  return [...out].sort();
}

function host(dir: string): HostFacts {
  const info = readFileSync('/proc/meminfo', 'utf8');
  const kib = (field: string): number => Number(new RegExp(`^${field}:\\s+(\\d+)`, 'm').exec(info)?.[1] ?? 0) * 1024;
  const fs = statfsSync(dir);
  return { mem_available_bytes: kib('MemAvailable'), mem_total_bytes: kib('MemTotal'), disk_free_bytes: fs.bavail * fs.bsize, disk_path: dir };
}

/** The oldest driver of the workers' CUDA stack: from its lock when the profile installs one. */
function workersMinDriver(root: string, env: PythonEnvParams): string | null {
  const file = env.requirements ?? DEFAULT_REQUIREMENTS;
  const text = readFileSync(join(root, file), 'utf8');
  return cudaOf(parseCompiled(text))?.min_driver ?? null;
}

interface Options {
  json: boolean;
  mini: boolean;
  genTokens: number;
  gptqTokens: number;
  /** A file bench/gpu-check.sh wrote: decide from its facts and host instead of measuring here. */
  facts?: string;
}

function parseArgs(args: readonly string[]): Options | string {
  const o: Options = { json: false, mini: true, genTokens: 16, gptqTokens: 1 << 20 };
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (a === '--json') o.json = true;
    else if (a === '--facts') {
      const f = args[++i];
      if (f === undefined) return '--facts needs a file (bench/gpu-check.sh writes one)';
      o.facts = f;
    }
    else if (a === '--no-mini') o.mini = false;
    else if (a === '--gen-tokens' || a === '--gptq-tokens') {
      const n = Number(args[++i]);
      if (!Number.isInteger(n) || n < 1) return `${a} needs a positive integer`;
      if (a === '--gen-tokens') o.genTokens = n;
      else o.gptqTokens = n;
    } else return `unexpected argument ${a}`;
  }
  return o;
}

/** The gpu-check file's serving bench (bench/gpu-builtin.py's JSON), as decide() reads it. */
export type BuiltinBench = NonNullable<DecideInput['builtin']>;

interface Measured {
  facts: PreflightFacts;
  host: HostFacts;
  seconds: number;
  builtin?: BuiltinBench;
  /** Why the facts are not the worker's whole result (a gpu-check file whose preflight was cut off). */
  incomplete?: string;
}

/** Build what the worker needs, run it on this machine, add the host. */
async function measure(ctx: CommandContext, o: Options, fm: FetchModelParams): Promise<Measured | number> {
  const localModel = fm.source !== 'hub';
  const first = (localModel ? ['python-env', 'fetch-model'] : ['python-env']).filter((st) => ctx.graph.defs.has(st));
  const built = first.length > 0 ? await ctx.runStages(first) : 0;
  if (built !== 0) return built;
  const reopened = Session.open({ root: ctx.root, workdir: ctx.workdir, profile: ctx.profile, graph: ctx.graph, overrides: ctx.overrides });
  if (!reopened.ok) return usage(reopened.error);
  const s = reopened.value;
  const sec = s.profile.sections;
  const q = sec['quantize'] as unknown as QuantizeParams;
  const hub = ['fetch-model', 'fetch-calib', 'fetch-eval'].filter((st) => ctx.graph.defs.has(st)).flatMap((stage) => {
    const standing = s.standingPins(stage);
    return s.pinRequests(stage).map((request) => ({ request, commit: standing[request.name]?.commit ?? null }));
  });
  const config = {
    device: q.device ?? 'cpu',
    quantize: q,
    hub,
    model_config_dir: localModel ? join(s.upstreamDir('fetch-model'), 'model') : fm.local_path !== undefined ? resolve(ctx.root, fm.local_path) : null,
    model_hub: fm.source === 'hub' && fm.local_path === undefined ? { repo: fm.repo, revision: hub.find((h) => h.request.kind === 'model')?.commit ?? fm.revision } : null,
    phases: o.mini ? phasesFor(q, sec['quality'] !== undefined, sec['eval'] !== undefined) : [],
    gen_tokens: o.genTokens,
    gptq_tokens: o.gptqTokens,
  };
  const abort = new AbortController();
  const onSignal = (): void => abort.abort();
  process.once('SIGINT', onSignal);
  const t0 = performance.now();
  const events = await runWorker({ stage: 'preflight', python: s.python, root: ctx.root, tmpDir: s.ws.tmpDir, signal: abort.signal, log: (l) => process.stderr.write(`[preflight] ${l}\n`) }, 'preflight', config);
  process.off('SIGINT', onSignal);
  await s.close();
  if (!events.ok) {
    process.stderr.write(`error: ${formatFailure(events.error)}\n`);
    return events.error.reason === 'interrupted' ? 130 : 1;
  }
  const outcome = checkWorkerOutcome('preflight', events.value);
  if (!outcome.ok) {
    process.stderr.write(`error: ${formatStageFailure(outcome.error)}\n`);
    return 1;
  }
  return { facts: outcome.value.facts, host: host(ctx.workdir), seconds: Math.round((performance.now() - t0) / 100) / 10 };
}

/** A file bench/gpu-check.sh wrote on a lent GPU: its facts and host, checked against the worker's schema. */
function fromFile(path: string): Measured | number {
  let raw: { facts?: unknown; facts_complete?: boolean; host?: HostFacts; seconds?: { preflight?: number }; builtin?: BuiltinBench | null; exit_codes?: { preflight?: number; builtin?: number } };
  try {
    raw = JSON.parse(readFileSync(path, 'utf8'));
  } catch (e) {
    process.stderr.write(`preflight: --facts ${path}: ${(e as Error).message}\n`);
    return 2;
  }
  const errors = engineSchemaSet().validate('workers/preflight-result.schema.json', { event: 'result', facts: raw.facts });
  if (errors.length > 0 || raw.host === undefined) {
    process.stderr.write(`preflight: --facts ${path} is not a gpu-check result: ${[...errors, ...(raw.host === undefined ? ['no host'] : [])].join('; ')}\n`);
    return 2;
  }
  // null: gpu-check ran the built-in engine's bench and it left no result (its .builtin.log beside the file says why)
  const code = raw.exit_codes?.builtin;
  const builtin: BuiltinBench | undefined = raw.builtin === null
    ? { error: `bench/gpu-builtin.py left no result (exit ${code ?? 'unknown'}${code === 124 ? ': cut off at its GPU_CHECK_BUILTIN_S limit' : ''}); its .builtin.log beside ${path} says why` }
    : raw.builtin;
  // false: the preflight was cut off or failed, and the facts are those of its last partial event
  const pc = raw.exit_codes?.preflight;
  const incomplete = raw.facts_complete === false
    ? `the preflight worker left no result (exit ${pc ?? 'unknown'}${pc === 124 ? ': cut off at its GPU_CHECK_PREFLIGHT_S limit' : ''}): these are the facts of its last partial event; its .preflight.log beside ${path} says where it stopped`
    : undefined;
  return { facts: raw.facts as PreflightFacts, host: raw.host, seconds: raw.seconds?.preflight ?? 0, ...(builtin !== undefined ? { builtin } : {}), ...(incomplete !== undefined ? { incomplete } : {}) };
}

/** The grader's burst: 16 requests of 4096 tokens, 300 s each (DESIGN.md), as far as the profile's smoke-serve section says otherwise. */
function burstOf(ss: { concurrency?: number; max_tokens?: number; deadline_s?: number }): NonNullable<DecideInput['burst']> {
  return { concurrency: ss.concurrency ?? 16, max_tokens: ss.max_tokens ?? 4096, deadline_s: ss.deadline_s ?? 300 };
}

function usage(f: Parameters<typeof formatFailure>[0]): number {
  process.stderr.write(`error: ${formatFailure(f)}\n`);
  return 2;
}

export const preflightCommand: ExtraCommand = {
  name: 'preflight',
  description: 'Check and measure this machine for the profile before a run: device, drivers, memory, disk, hub access, kernels, timed mini-runs; one go/no-go table',
  json: true,
  async run(args: string[], ctx: CommandContext): Promise<number> {
    const o = parseArgs(args);
    if (typeof o === 'string') {
      process.stderr.write(`preflight: ${o}\n${USAGE}\n`);
      return 2;
    }
    const opened = Session.open({ root: ctx.root, workdir: ctx.workdir, profile: ctx.profile, graph: ctx.graph, overrides: ctx.overrides });
    if (!opened.ok) return usage(opened.error);
    const s = opened.value;
    await s.close();
    const sec = s.profile.sections;
    const m = o.facts !== undefined ? fromFile(o.facts) : await measure(ctx, o, sec['fetch-model'] as unknown as FetchModelParams);
    if (typeof m === 'number') return m;
    const calibNames = new Set(((sec['fetch-calib'] as unknown as FetchCalibParams | undefined)?.sources ?? []).map((c) => c.name));
    const vw = sec['vendor-wheels'] as unknown as VendorWheelsParams | undefined;
    const decision = decide({
      profile: ctx.profile,
      quality: sec['quality'] as { seq_len?: number; sequences?: number } | undefined,
      workersMinDriver: workersMinDriver(ctx.root, (sec['python-env'] ?? {}) as PythonEnvParams),
      servingMinDriver: vw?.cuda_major !== undefined ? (MIN_DRIVER_BY_MAJOR[vw.cuda_major] ?? null) : null,
      checkpointBytes: m.facts.hub.find((h) => h.kind === 'model' && h.ok)?.bytes ?? null,
      calibrationBytes: m.facts.hub.filter((h) => calibNames.has(h.name)).reduce((n, h) => n + h.bytes, 0),
      servingWheels: vw?.cuda_major !== undefined,
      host: m.host,
      facts: m.facts,
      ...(m.builtin !== undefined ? { builtin: m.builtin } : {}),
      ...(m.incomplete !== undefined ? { incomplete: m.incomplete } : {}),
      ...(sec['eval'] !== undefined ? { eval: evalPlan(ctx.root, sec['eval'] as unknown as EvalParams, sec['fetch-eval'] as unknown as FetchEvalParams | undefined) } : {}),
      ...(sec['smoke-serve'] !== undefined ? { burst: burstOf(sec['smoke-serve'] as { concurrency?: number; max_tokens?: number; deadline_s?: number }) } : {}),
    });
    const report: PreflightReport = {
      schema: 1,
      profile: ctx.profile,
      created: new Date().toISOString(),
      seconds: m.seconds,
      source: o.facts ?? 'measured here',
      verdict: decision.verdict,
      checks: decision.checks,
      phases: decision.phases,
      total_seconds: decision.total_seconds,
      unmeasured: decision.unmeasured,
      host: m.host,
      facts: m.facts,
    };
    const errors = engineSchemaSet().validate(REPORT_SCHEMA, report);
    if (errors.length > 0) {
      process.stderr.write(`preflight: the report does not pass schemas/${REPORT_SCHEMA}: ${errors.join('; ')}\n`);
      return 1;
    }
    const path = join(dirname(s.ws.lockFile(ctx.profile)), REPORT_FILE);
    mkdirSync(dirname(path), { recursive: true });
    writeFileAtomicSync(path, JSON.stringify(report, null, 2) + '\n');
    if (o.json) process.stdout.write(JSON.stringify(report, null, 2) + '\n');
    else process.stdout.write(formatDecision(ctx.profile, decision) + `report: ${path}\n`);
    return decision.verdict === 'go' ? 0 : 1;
  },
};
