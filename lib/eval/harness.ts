/**
 * One evaluation through EleutherAI's lm-evaluation-harness, scored as the grader scores.
 *
 *   lm-eval (local-chat-completions, 16 in flight) --> recorder (recorder.ts) --> the served model
 *        |  its samples_<task>.jsonl, results.json                 | wall time, finish reason, tokens, fallback
 *        +------------------------- joined by the request's messages --------------------------+
 *
 * The worker (python/ternforge/harness.py) turns each benchmark's rows (harness-data.ts) into lm-eval's task,
 * runs `lm_eval run`, and reports its output files. Here each logged sample is joined to the recorder's record
 * of its request. A sample's score is lm-eval's own per-sample metric under the benchmark's filter (MATH:
 * `math_verify`; GPQA and MMLU-Pro: `exact_match` of the extracted letter); LiveCodeBench's is the sandbox's
 * verdict on the code lm-eval received (code-sandbox.ts). Then the grader's rule: a reply cut at `max_tokens`,
 * past the deadline or failed scores zero whatever its text, and is counted apart (score.ts `zeroReason`).
 * The result is an eval report (schemas/eval-report.schema.json) with a `harness` section; lm-eval's files are
 * copied next to it.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import type { Failure } from '../../engine/failure.ts';
import { withPlaceholders } from '../../engine/host-paths.ts';
import { ok, type Result } from '../../engine/result.ts';
import type { WorkerEvent } from '../../engine/types.ts';
import type { EvalReport, HarnessTask, QuestionOutcome, SetSummary } from '../../schemas/generated/eval-report.ts';
import type { HarnessResult } from '../../schemas/generated/harness-result.ts';
import type { WorkerOutcomeFailure } from '../failures.ts';
import { runWorkerCommand } from '../worker-results.ts';
import { requestOutcome, type ChatMessage, type Completion } from './client.ts';
import { sandboxInfo, scoreCode, type SandboxOptions } from './code-sandbox.ts';
import { answerText } from './content.ts';
import { questionIdOf, type BenchmarkData } from './harness-data.ts';
import { mapPool } from './pool.ts';
import { messagesKey, startRecorder, type RecordedRequest } from './recorder.ts';
import { tabulate, zeroReason, type Benchmark } from './score.ts';

export interface HarnessOptions {
  /** The served model's root, e.g. `http://127.0.0.1:8000`. */
  baseUrl: string;
  /** Each benchmark's rows (harness-data.ts). */
  data: readonly BenchmarkData[];
  /** The question sets the rows came from, as the report names them. */
  sets: readonly SetSummary[];
  /** `<benchmark>/<item id>` -> the set's name, for each outcome's `set`; else `<benchmark>` -> it (a real split). */
  origin: ReadonlyMap<string, string>;
  /** Runs `python -m ternforge harness` (a stage's context). */
  worker: { worker(command: string, config: unknown): Promise<Result<WorkerEvent[], Failure>> };
  /** The worker's task files, lm-eval's output and its datasets cache go here (the caller deletes it). */
  scratch: string;
  /**
   * lm-eval's output files are copied here, each of this machine's `places` written as its name (they hold
   * the run's command line and directories); `keptAs` is that directory as the report names it.
   */
  keep: { dir: string; keptAs: string; places: ReadonlyArray<readonly [string, string]> };
  concurrency: number;
  maxTokens: number;
  /** The grader's per-request deadline. */
  timeoutMs: number;
  model: string;
  /** At most this many items per task (lm-eval's --limit); all when absent. */
  limit?: number;
  sandbox?: SandboxOptions & { concurrency?: number };
  signal?: AbortSignal;
  /** Progress lines (`progressLine`) as lm-eval's requests end: at most one per PROGRESS_MS, and the last. */
  log?: (line: string) => void;
}

/** How often the harness's progress line is written while lm-eval's requests run. */
export const PROGRESS_MS = 30_000;

/** A progress line over the requests ended so far: how many, and how many were cut, late or failed. */
export function progressLine(records: readonly RecordedRequest[]): string {
  const c = records.map((r) => r.completion);
  const cut = c.filter((x) => x.finishReason === 'length' && !x.timedOut).length;
  const late = c.filter((x) => x.timedOut).length;
  const failed = c.filter((x) => x.error !== null && !x.timedOut).length;
  return `lm-eval: ${records.length} requests answered (${cut} cut at max_tokens, ${late} past the deadline, ${failed} failed)`;
}

/** The parts of one line of lm-eval's samples file that are read here. */
interface Sample {
  doc_id: number;
  doc: Record<string, unknown>;
  arguments: { gen_args_0: { arg_0: [string, ...unknown[]] } };
  resps: string[][];
  filtered_resps: unknown[];
  filter: string;
  [metric: string]: unknown;
}

const ANSWER_TAIL = 300;

function readSamples(file: string, filter: string): Sample[] {
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as Sample)
    .filter((s) => s.filter === filter);
}

/** The chat messages lm-eval sent for a sample (its first argument is their JSON). */
function sampleMessages(s: Sample): ChatMessage[] {
  return JSON.parse(s.arguments.gen_args_0.arg_0[0]) as ChatMessage[];
}

/** lm-eval's aggregate for `<metric>,<filter>` of a task in its results file. */
function lmEvalValue(results: { results?: Record<string, Record<string, unknown>> }, task: string, metric: string, filter: string): number | null {
  const v = results.results?.[task]?.[`${metric},${filter}`];
  return typeof v === 'number' ? v : null;
}

/** Records by the messages they carried, each key's in arrival order. */
function byMessages(records: readonly RecordedRequest[]): Map<string, RecordedRequest[]> {
  const m = new Map<string, RecordedRequest[]>();
  for (const r of records) {
    const k = messagesKey(r.messages);
    m.set(k, [...(m.get(k) ?? []), r]);
  }
  return m;
}

const missingRecord = (id: string): Completion => ({ id, content: null, finishReason: null, usage: null, fallback: false, latencyMs: 0, timedOut: false, httpStatus: null, error: 'the recorder saw no request for this sample' });

interface Job {
  benchmark: Benchmark;
  task: string;
  metric: string;
  sample: Sample;
  completion: Completion;
}

async function outcomeOf(job: Job, origin: ReadonlyMap<string, string>, opts: HarnessOptions): Promise<QuestionOutcome> {
  const { benchmark, sample, completion: c } = job;
  const id = questionIdOf(benchmark, sample.doc);
  const text = sample.resps[0]?.[0] ?? '';
  const zero = zeroReason(c);
  const detail = { zeroReason: zero, answerTail: answerText(text).slice(-ANSWER_TAIL), fallback: c.fallback, lmEval: { task: job.task, docId: sample.doc_id, [job.metric]: sample[job.metric] ?? null } };
  const base = {
    id,
    set: origin.get(`${benchmark}/${id}`) ?? origin.get(benchmark) ?? job.task,
    benchmark,
    ...requestOutcome(c),
  };
  if (benchmark === 'livecodebench') {
    if (zero !== null) return { ...base, correct: false, extracted: null, detail };
    const tests = JSON.parse(String(sample.doc.tests_json)) as Parameters<typeof scoreCode>[1]['tests'];
    const fnName = typeof sample.doc.fn_name === 'string' && sample.doc.fn_name !== '' ? sample.doc.fn_name : undefined;
    const r = await scoreCode(text, { tests, ...(fnName !== undefined ? { fnName } : {}) }, { ...opts.sandbox, ...(opts.signal !== undefined ? { signal: opts.signal } : {}) });
    return { ...base, correct: r.passed, extracted: r.verdict, detail: { ...detail, tests: r.tests } };
  }
  const value = sample[job.metric];
  if (typeof value !== 'number') throw new Error(`${job.task} sample ${sample.doc_id} has no numeric ${job.metric}`);
  const extracted = sample.filtered_resps[0];
  return { ...base, correct: zero === null && value >= 1, extracted: typeof extracted === 'string' ? extracted : extracted === undefined ? null : JSON.stringify(extracted), detail };
}

/** Ask every benchmark's items through lm-eval and score them as the grader does. */
export async function runHarness(opts: HarnessOptions): Promise<Result<EvalReport, Failure | WorkerOutcomeFailure>> {
  const started = performance.now();
  const startedAt = new Date().toISOString();
  let logged = performance.now();
  const onRecord = (records: readonly RecordedRequest[]): void => {
    if (opts.log === undefined || performance.now() - logged < PROGRESS_MS) return;
    logged = performance.now();
    opts.log(progressLine(records));
  };
  const recorder = await startRecorder({ upstream: opts.baseUrl, timeoutMs: opts.timeoutMs, onRecord, ...(opts.signal !== undefined ? { signal: opts.signal } : {}) });
  let ran: Result<HarnessResult, Failure | WorkerOutcomeFailure>;
  try {
    ran = await runWorkerCommand(opts.worker, 'harness', {
      base_url: `${recorder.url}/v1/chat/completions`,
      model: opts.model,
      concurrency: opts.concurrency,
      // past the recorder's deadline, which always answers first
      client_timeout_s: Math.ceil(opts.timeoutMs / 1000) + 30,
      max_tokens: opts.maxTokens,
      out: join(opts.scratch, 'lm-eval'),
      work: join(opts.scratch, 'work'),
      benchmarks: opts.data,
      ...(opts.limit !== undefined ? { limit: opts.limit } : {}),
    });
  } finally {
    await recorder.close();
  }
  opts.log?.(progressLine(recorder.records));
  if (!ran.ok) return ran;
  const h = ran.value;

  mkdirSync(opts.keep.dir, { recursive: true });
  const kept = [h.results, ...h.benchmarks.flatMap((b) => Object.values(b.samples))].map((f) => {
    writeFileSync(join(opts.keep.dir, basename(f)), withPlaceholders(readFileSync(f, 'utf8'), opts.keep.places));
    return `${opts.keep.keptAs}/${basename(f)}`;
  });
  const results = JSON.parse(readFileSync(h.results, 'utf8')) as { results?: Record<string, Record<string, unknown>> };

  const records = byMessages(recorder.records);
  let claimed = 0;
  const jobs: Job[] = h.benchmarks.flatMap((b) =>
    b.tasks.flatMap((task) =>
      readSamples(b.samples[task]!, b.filter).map((sample) => {
        const queue = records.get(messagesKey(sampleMessages(sample)));
        const record = queue?.shift();
        if (record !== undefined) claimed += 1;
        return { benchmark: b.benchmark, task, metric: b.metric, sample, completion: record?.completion ?? missingRecord(`${task}/${sample.doc_id}`) };
      }),
    ),
  );
  const questions = await mapPool(jobs, opts.sandbox?.concurrency ?? 2, (j) => outcomeOf(j, opts.origin, opts));
  const tasks: HarnessTask[] = h.benchmarks.map((b) => ({
    benchmark: b.benchmark,
    task: b.task,
    tasks: b.tasks,
    referenceTask: b.reference_task,
    filter: b.filter,
    metric: b.metric,
    lmEvalValue: b.benchmark === 'livecodebench' ? null : lmEvalValue(results, b.task, b.metric, b.filter),
  }));
  const hasCode = jobs.some((j) => j.benchmark === 'livecodebench');
  return ok({
    version: 1,
    startedAt,
    wallMs: performance.now() - started,
    settings: { url: `${opts.baseUrl.replace(/\/+$/, '')}/v1/chat/completions`, model: opts.model, concurrency: opts.concurrency, maxTokens: opts.maxTokens, temperature: 0, timeoutMs: opts.timeoutMs, extraBody: {} },
    sandbox: hasCode ? await sandboxInfo(opts.sandbox) : null,
    // the items asked of each set (all of them, unless `limit`; a real split's count is known only now)
    sets: opts.sets.map((s) => ({ ...s, questions: questions.filter((q) => q.set === s.name).length })),
    table: tabulate(questions),
    questions,
    harness: { lmEval: h.lm_eval, mathVerify: h.math_verify, argv: h.argv.map((a) => withPlaceholders(a, opts.keep.places)), tasks, files: kept, requests: recorder.records.length, unmatched: recorder.records.length - claimed },
  });
}
