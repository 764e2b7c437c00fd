/* Generated from schemas/sweep-record.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * sweep.json, written by the eval stage when its profile declares a sweep (lib/eval/sweep.ts): each value of one request parameter measured on sets of the role `selection` only, and the value the rule chose. Kept as evidence that no evaluation question chose a default.
 */
export interface SweepRecord {
  parameter: string;
  chosen: number;
  rule: string;
  points: SweepPoint[];
  sets: {
    name: string;
    path: string;
    sha256: string;
    /**
     * Always `selection`: lib/eval/sweep.ts refuses any other before it measures.
     */
    role: 'selection' | 'evaluation';
    source: Source;
  }[];
}
/**
 * One measured value.
 */
export interface SweepPoint {
  value: number;
  meanScore: number;
  /**
   * Mean over benchmarks of raw accuracy.
   */
  meanAccuracy: number;
  truncations: number;
  timeouts: number;
  /**
   * Mean completion tokens over all replies that reported usage; null when none did.
   */
  meanCompletionTokens: number | null;
  table: ScoreTable;
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
