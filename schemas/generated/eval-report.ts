/* Generated from schemas/eval-report.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * eval.json, written by the eval stage (lib/eval/run.ts): every question of the evaluation sets asked of the served submission, scored by the grader's rules, and the per-benchmark table. Every figure is a measurement of that run.
 */
export interface EvalReport {
  /**
   * Report layout version.
   */
  version: 1;
  /**
   * ISO 8601 time the first request was sent.
   */
  startedAt: string;
  wallMs: number;
  settings: ClientSettings;
  /**
   * The code sandbox; null when no code question was asked.
   */
  sandbox: SandboxInfo | null;
  sets: SetSummary[];
  table: ScoreTable;
  questions: QuestionOutcome[];
  grade?: Grade;
  /**
   * How lm-evaluation-harness asked and scored (lib/eval/harness.ts): its versions and command line, the task, filter and metric each benchmark was read by with lm-eval's own aggregate, and its output files as kept in the stage's outputs. Absent in a report of lib/eval/run.ts (a sweep's).
   */
  harness?: {
    lmEval: string;
    mathVerify: string;
    argv: string[];
    tasks: HarnessTask[];
    /**
     * lm-eval's results and samples files, relative to the stage's outputs.
     */
    files: string[];
    /**
     * Chat-completions requests the recorder saw.
     */
    requests: number;
    /**
     * Recorded requests no sample claimed (0 unless lm-eval asked the same thing twice).
     */
    unmatched: number;
  };
}
/**
 * The settings every request used (lib/eval/client.ts).
 */
export interface ClientSettings {
  url: string;
  model: string;
  concurrency: number;
  maxTokens: number;
  temperature: number;
  timeoutMs: number;
  /**
   * Extra request body fields (a sweep's parameter).
   */
  extraBody: {
    [k: string]: unknown;
  };
}
/**
 * The resolved sandbox.
 */
export interface SandboxInfo {
  /**
   * The interpreter path inside the sandbox.
   */
  python: string;
  pythonVersion: string;
  isolation: Isolation;
  timeLimitMs: number;
  memoryBytes: number;
  outputBytes: number;
}
/**
 * How model-written code is confined (lib/eval/code-sandbox.ts).
 */
export interface Isolation {
  tool: 'bubblewrap';
  version: string;
  /**
   * The uid/gid the code runs as inside the sandbox.
   */
  uid: number;
  /**
   * The uid bwrap runs as on the host (65534 when this process is root).
   */
  hostUid: number;
  namespaces: string[];
  /**
   * Process limit applied before the solution runs.
   */
  processes: number;
  openFiles: number;
  fileBytes: number;
  /**
   * Size of each tmpfs (`/work`, `/tmp`).
   */
  tmpfsBytes: number;
}
/**
 * A question set as the report names it: which file, exactly (sha256), of which role and source.
 */
export interface SetSummary {
  name: string;
  path: string;
  sha256: string;
  /**
   * `evaluation`: only ever scored (benchmark items and their stand-ins). `selection`: may choose defaults such as the reasoning budget; written by the project or drawn from train splits, never benchmark items.
   */
  role: 'selection' | 'evaluation';
  /**
   * The benchmark whose format, prompt, scorer and normalisation this set follows (not a claim that its items come from it).
   */
  benchmark: 'gpqa-diamond' | 'mmlu-pro' | 'math-500' | 'livecodebench';
  source: Source;
  questions: number;
}
/**
 * Where the questions came from, so a reviewer can check the role.
 */
export interface Source {
  /**
   * `project-written`: authored for this repository; `train-split`: a public corpus's train split; `benchmark`: items of a graded benchmark (role must be `evaluation`).
   */
  kind: 'project-written' | 'train-split' | 'benchmark';
  description: string;
  /**
   * Hub dataset id, when drawn from one.
   */
  dataset?: string;
  /**
   * Dataset split, when drawn from one.
   */
  split?: string;
  /**
   * Pinned dataset revision, when drawn from one.
   */
  revision?: string;
  license?: string;
}
/**
 * One row per benchmark present, and the mean of their normalised scores.
 */
export interface ScoreTable {
  rows: BenchmarkRow[];
  /**
   * Mean normalised score over the rows (the grader's final number when all four are present).
   */
  meanScore: number;
  /**
   * The graded benchmarks that had no questions (the mean then covers fewer than four).
   *
   * Items: The benchmark whose format, prompt, scorer and normalisation this set follows (not a claim that its items come from it).
   */
  missing: ('gpqa-diamond' | 'mmlu-pro' | 'math-500' | 'livecodebench')[];
}
/**
 * One row of the table: a benchmark's figures.
 */
export interface BenchmarkRow {
  /**
   * The benchmark whose format, prompt, scorer and normalisation this set follows (not a claim that its items come from it).
   */
  benchmark: 'gpqa-diamond' | 'mmlu-pro' | 'math-500' | 'livecodebench';
  questions: number;
  correct: number;
  /**
   * correct / questions.
   */
  accuracy: number;
  /**
   * The grader's normalised score.
   */
  score: number;
  /**
   * Replies that finished with `length`.
   */
  truncations: number;
  /**
   * Requests past their deadline.
   */
  timeouts: number;
  /**
   * Requests that failed otherwise (connection refused, HTTP 5xx, malformed reply).
   */
  errors: number;
  /**
   * Replies whose content the server wrote itself (`ternforge.fallback_content`), not the model; scored as they read.
   */
  fallbacks?: number;
  /**
   * Mean `completion_tokens` over replies that reported usage; null when none did.
   */
  meanCompletionTokens: number | null;
  /**
   * Nearest-rank latency percentile over all requests, timeouts included.
   */
  p50LatencyMs: number;
  p95LatencyMs: number;
}
/**
 * One scored question.
 */
export interface QuestionOutcome {
  /**
   * Question id, unique within its set.
   */
  id: string;
  /**
   * The question set's name.
   */
  set: string;
  /**
   * The benchmark whose format, prompt, scorer and normalisation this set follows (not a claim that its items come from it).
   */
  benchmark: 'gpqa-diamond' | 'mmlu-pro' | 'math-500' | 'livecodebench';
  /**
   * Counted correct by the grader's rules (zero for timeouts, errors and truncation).
   */
  correct: boolean;
  /**
   * What the scorer extracted (letter, boxed answer, code verdict); null when nothing was found.
   */
  extracted: string | null;
  finishReason: string | null;
  /**
   * Finished with `length`: cut off at `max_tokens`.
   */
  truncated: boolean;
  timedOut: boolean;
  error: string | null;
  /**
   * `usage.completion_tokens`; null when the server sent no usage.
   */
  completionTokens: number | null;
  /**
   * Wall time from sending the request to the end of its body (or the abort).
   */
  latencyMs: number;
  /**
   * Scorer-specific facts (code: per-test verdicts).
   */
  detail?: {};
}
/**
 * The predicted grade (lib/eval/score.ts predictedGrade): each benchmark rescaled from chance to the grader's ceiling, and to the measured one (the full-precision model in the same run, eval-float.json).
 */
export interface Grade {
  rows: {
    /**
     * The benchmark whose format, prompt, scorer and normalisation this set follows (not a claim that its items come from it).
     */
    benchmark: 'gpqa-diamond' | 'mmlu-pro' | 'math-500' | 'livecodebench';
    floor: number;
    graderCeiling: number;
    ternaryAccuracy: number;
    floatAccuracy: number | null;
    scoreGrader: number;
    /**
     * Null when the measured ceiling is not above chance.
     */
    scoreMeasured: number | null;
    /**
     * The float model's own score with the grader's ceiling (about 100 when the run reproduces the grader).
     */
    floatScoreGrader: number | null;
  }[];
  meanGrader: number;
  meanMeasured: number | null;
}
export interface HarnessTask {
  /**
   * The benchmark whose format, prompt, scorer and normalisation this set follows (not a claim that its items come from it).
   */
  benchmark: 'gpqa-diamond' | 'mmlu-pro' | 'math-500' | 'livecodebench';
  task: string;
  tasks: string[];
  /**
   * The lm-eval 0.4.13 task it runs (null: ours, in lm-eval's format).
   */
  referenceTask: string | null;
  filter: string;
  metric: string;
  /**
   * lm-eval's own aggregate of the metric (its results file), before the grader's rule for cut, late and failed replies; null where lm-eval does not score the answer (livecodebench: the sandbox does).
   */
  lmEvalValue: number | null;
}
