/**
 * One evaluation: every question of the given sets sent to the endpoint with the grader's settings,
 * scored by its format's scorer, and tabulated per benchmark. Writes nothing; the eval stage writes
 * the returned report into its evidence.
 */
import type { CodeQuestion, MathQuestion } from '../../schemas/generated/eval-question.ts';
import { scoreChoice } from './choice.ts';
import { completeAll, requestOutcome, type Completion } from './client.ts';
import { sandboxInfo, scoreCode, type SandboxOptions } from './code-sandbox.ts';
import { answerText } from './content.ts';
import { setSummary } from './harness-data.ts';
import type { MathVerdict, MathVerifier } from './math-verify.ts';
import { mapPool } from './pool.ts';
import { promptFor, type Question } from './prompts.ts';
import type { LoadedSet } from './questions.ts';
import { tabulate, zeroReason, type QuestionOutcome } from './score.ts';
import type { EvalReport, SetSummary } from '../../schemas/generated/eval-report.ts';
export type { EvalReport, SetSummary };

export interface RunEvalOptions {
  /** Server root, e.g. `http://127.0.0.1:8000`. */
  baseUrl: string;
  /** Validated question sets (see questions.ts); any role may be evaluated. */
  sets: readonly LoadedSet[];
  /** Requests in flight. Default 16. */
  concurrency?: number;
  /** Default 4096. */
  maxTokens?: number;
  /** Per-request deadline in ms. Default 300000. */
  timeoutMs?: number;
  /** Default 0. */
  temperature?: number;
  model?: string;
  /** Extra request body fields (a sweep's parameter). */
  extraBody?: Record<string, unknown>;
  /** Code sandbox limits, and how many programs run at once (default 2). */
  sandbox?: SandboxOptions & { concurrency?: number };
  /** Scores MATH answers (math-verify.ts); needed when a set holds math questions. */
  mathVerify?: MathVerifier;
  signal?: AbortSignal;
}

interface Job {
  readonly set: LoadedSet;
  readonly question: Question;
  readonly key: string;
}

/**
 * What the eval stage writes, each checked against its schema (relative to schemas/) before it is written;
 * the report stage reads them back through the same schemas (lib/report/evidence-files.ts).
 */
export const EVAL_OUTPUTS = {
  report: { file: 'eval.json', schema: 'eval-report.schema.json' },
  /** The same lm-eval run against the full-precision model: the measured ceiling. */
  float: { file: 'eval-float.json', schema: 'eval-report.schema.json' },
  answers: { file: 'answers.json', schema: 'answer-retention.schema.json' },
  sweep: { file: 'sweep.json', schema: 'sweep-record.schema.json' },
} as const;

/** Where the eval stage keeps lm-eval's own output files (one directory per served model), in its outputs. */
export const LM_EVAL_DIR = 'lm-eval';

const ANSWER_TAIL = 300;

function outcomeBase(job: Job, c: Completion): Omit<QuestionOutcome, 'correct' | 'extracted' | 'detail'> {
  return {
    id: job.question.id,
    set: job.set.set.name,
    benchmark: job.set.set.benchmark,
    ...requestOutcome(c),
  };
}

/** math-verify's verdict on every math reply (its answer text: content past any leaked reasoning), by job index, in one batch. */
async function verifyMath(jobs: readonly Job[], completions: readonly Completion[], verify: MathVerifier | undefined): Promise<Map<number, MathVerdict>> {
  const idx = jobs.flatMap((j, i) => (j.question.kind === 'math' ? [i] : []));
  if (idx.length === 0) return new Map();
  if (verify === undefined) throw new Error('runEval: math questions need a math-verify scorer (RunEvalOptions.mathVerify)');
  const r = await verify(idx.map((i) => ({ reply: answerText(completions[i]!.content), reference: (jobs[i]!.question as MathQuestion).answer })));
  if (!r.ok) throw new Error(`runEval: math-verify failed: ${JSON.stringify(r.error)}`);
  return new Map(idx.map((i, k) => [i, r.value[k]!]));
}

/** Score every reply; timeouts, errors and truncated replies score zero (code is then not run). */
async function scoreAll(jobs: readonly Job[], completions: readonly Completion[], opts: RunEvalOptions): Promise<QuestionOutcome[]> {
  const sandboxLimit = opts.sandbox?.concurrency ?? 2;
  const math = await verifyMath(jobs, completions, opts.mathVerify);
  return mapPool(jobs, sandboxLimit, async (job, i) => {
    const c = completions[i]!;
    const base = outcomeBase(job, c);
    const zero = zeroReason(c);
    const tailText = answerText(c.content).slice(-ANSWER_TAIL);
    const q = job.question;
    switch (q.kind) {
      case 'choice': {
        const s = scoreChoice(c.content, q.options.length, q.answer);
        return { ...base, correct: zero === null && s.correct, extracted: s.extracted, detail: { zeroReason: zero, answerTail: tailText } };
      }
      case 'math': {
        const s = math.get(i)!;
        return { ...base, correct: zero === null && s.correct, extracted: s.extracted, detail: { zeroReason: zero, answerTail: tailText } };
      }
      case 'code': {
        if (zero !== null) return { ...base, correct: false, extracted: null, detail: { zeroReason: zero, answerTail: tailText } };
        const r = await scoreCode(c.content, q as CodeQuestion, { ...opts.sandbox, ...(opts.signal !== undefined ? { signal: opts.signal } : {}) });
        return { ...base, correct: r.passed, extracted: r.verdict, detail: { zeroReason: null, tests: r.tests, answerTail: tailText } };
      }
    }
  });
}

/** Ask, score and tabulate every question of `opts.sets`. */
export async function runEval(opts: RunEvalOptions): Promise<EvalReport> {
  const started = performance.now();
  const startedAt = new Date().toISOString();
  const jobs: Job[] = opts.sets.flatMap((set) => set.set.questions.map((question) => ({ set, question, key: `${set.set.name}/${question.id}` })));
  const { settings, completions } = await completeAll(
    jobs.map((j) => ({ id: j.key, messages: promptFor(j.question) })),
    {
      baseUrl: opts.baseUrl,
      concurrency: opts.concurrency,
      maxTokens: opts.maxTokens,
      timeoutMs: opts.timeoutMs,
      temperature: opts.temperature,
      model: opts.model,
      extraBody: opts.extraBody,
      signal: opts.signal,
    },
  );
  const questions = await scoreAll(jobs, completions, opts);
  const hasCode = jobs.some((j) => j.question.kind === 'code');
  const sandbox = hasCode ? await sandboxInfo(opts.sandbox) : null;
  return {
    version: 1,
    startedAt,
    wallMs: performance.now() - started,
    settings,
    sandbox,
    sets: opts.sets.map(setSummary),
    table: tabulate(questions),
    questions,
  };
}
