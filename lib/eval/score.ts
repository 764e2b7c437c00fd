/**
 * Normalisation and tables, exactly as the grader scores: per benchmark,
 * `clamp((accuracy - floor) / (ceiling - floor), 0, 1) * 100`, where the floor is chance and the ceiling
 * is the bf16 reference model under the grader; the final score is the mean over benchmarks. A request
 * that timed out, failed, or finished with `length` (cut off at `max_tokens`) scores zero whatever its
 * text says.
 */
import type { QuestionSet } from '../../schemas/generated/eval-question.ts';
import type { BenchmarkRow, Grade, QuestionOutcome, ScoreTable } from '../../schemas/generated/eval-report.ts';
export type { BenchmarkRow, Grade, QuestionOutcome, ScoreTable };

/** The four graded benchmarks (the `benchmark` field of a question set). */
export type Benchmark = QuestionSet['benchmark'];

/** Chance level (floor) and the bf16 reference accuracy (ceiling) per benchmark, from the grader. */
export const NORMALISATION: Readonly<Record<Benchmark, { readonly floor: number; readonly ceiling: number }>> = {
  'gpqa-diamond': { floor: 0.25, ceiling: 0.571 },
  'math-500': { floor: 0, ceiling: 0.866 },
  livecodebench: { floor: 0, ceiling: 0.425 },
  'mmlu-pro': { floor: 0.111, ceiling: 0.716 },
};

/** Benchmarks in the order tables list them. */
export const BENCHMARK_ORDER: readonly Benchmark[] = ['gpqa-diamond', 'math-500', 'livecodebench', 'mmlu-pro'];

/** The grader's normalised score (0..100) for a raw accuracy (0..1) on one benchmark. */
export function normalisedScore(benchmark: Benchmark, accuracy: number): number {
  const { floor, ceiling } = NORMALISATION[benchmark];
  const x = (accuracy - floor) / (ceiling - floor);
  return Math.min(1, Math.max(0, x)) * 100;
}

/** What the client observed for one request (see client.ts). */
export interface RequestFacts {
  /** `finish_reason` of the first choice; null when no reply came. */
  readonly finishReason: string | null;
  /** The request ran past its deadline and was aborted. */
  readonly timedOut: boolean;
  /** Transport or HTTP failure; null when a well-formed reply came. */
  readonly error: string | null;
}

/** Why a reply scored zero before its answer was read, or null when its answer is read. */
export function zeroReason(r: RequestFacts): 'timeout' | 'error' | 'truncated' | null {
  if (r.timedOut) return 'timeout';
  if (r.error !== null) return 'error';
  if (r.finishReason === 'length') return 'truncated';
  return null;
}

/** Nearest-rank percentile (p in 0..100) of a non-empty list. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) throw new Error('percentile of an empty list');
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.max(1, Math.ceil((p / 100) * sorted.length));
  return sorted[rank - 1]!;
}

/** Group outcomes by benchmark and compute the table. */
export function tabulate(outcomes: readonly QuestionOutcome[]): ScoreTable {
  const rows: BenchmarkRow[] = [];
  for (const benchmark of BENCHMARK_ORDER) {
    const qs = outcomes.filter((o) => o.benchmark === benchmark);
    if (qs.length === 0) continue;
    const correct = qs.filter((o) => o.correct).length;
    const accuracy = correct / qs.length;
    const tokens = qs.map((o) => o.completionTokens).filter((t): t is number => t !== null);
    const latencies = qs.map((o) => o.latencyMs);
    rows.push({
      benchmark,
      questions: qs.length,
      correct,
      accuracy,
      score: normalisedScore(benchmark, accuracy),
      truncations: qs.filter((o) => o.truncated).length,
      timeouts: qs.filter((o) => o.timedOut).length,
      errors: qs.filter((o) => o.error !== null && !o.timedOut).length,
      fallbacks: qs.filter((o) => (o.detail as { fallback?: unknown } | undefined)?.fallback === true).length,
      meanCompletionTokens: tokens.length === 0 ? null : tokens.reduce((a, b) => a + b, 0) / tokens.length,
      p50LatencyMs: percentile(latencies, 50),
      p95LatencyMs: percentile(latencies, 95),
    });
  }
  const meanScore = rows.length === 0 ? 0 : rows.reduce((a, r) => a + r.score, 0) / rows.length;
  return { rows, meanScore, missing: BENCHMARK_ORDER.filter((b) => !rows.some((r) => r.benchmark === b)) };
}

/** The table as Markdown, for logs, evidence and the report. */
export function formatTable(table: ScoreTable): string {
  const head = '| benchmark | n | correct | accuracy | score | truncated | timeouts | errors | fallbacks | mean tokens | p50 s | p95 s |';
  const rule = '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|';
  const lines = table.rows.map(
    (r) =>
      `| ${r.benchmark} | ${r.questions} | ${r.correct} | ${r.accuracy.toFixed(3)} | ${r.score.toFixed(1)} | ${r.truncations} | ${r.timeouts} | ${r.errors} | ${r.fallbacks ?? '-'} | ${r.meanCompletionTokens === null ? '-' : r.meanCompletionTokens.toFixed(0)} | ${(r.p50LatencyMs / 1000).toFixed(2)} | ${(r.p95LatencyMs / 1000).toFixed(2)} |`,
  );
  const missing = table.missing.length === 0 ? '' : ` (over ${table.rows.length} of 4 benchmarks; missing: ${table.missing.join(', ')})`;
  return [head, rule, ...lines, '', `mean normalised score: ${table.meanScore.toFixed(1)}${missing}`].join('\n');
}

/** `clamp((accuracy - floor) / (ceiling - floor), 0, 1) * 100`; null when the ceiling is not above the floor. */
function rescale(accuracy: number, floor: number, ceiling: number): number | null {
  if (!(ceiling > floor)) return null;
  return Math.min(1, Math.max(0, (accuracy - floor) / (ceiling - floor))) * 100;
}

/**
 * The grade the grader would give, twice: with its own ceiling (the bf16 reference's accuracy under the
 * grader, NORMALISATION) and with the measured one (the full-precision model's accuracy in the same run,
 * `float`). A benchmark whose measured ceiling is at or below chance has no measured score (null) and is left
 * out of that mean.
 */
export function predictedGrade(ternary: ScoreTable, float: ScoreTable): Grade {
  const rows = ternary.rows.map((t) => {
    const f = float.rows.find((r) => r.benchmark === t.benchmark);
    const { floor, ceiling } = NORMALISATION[t.benchmark];
    const floatAccuracy = f?.accuracy ?? null;
    return {
      benchmark: t.benchmark,
      floor,
      graderCeiling: ceiling,
      ternaryAccuracy: t.accuracy,
      floatAccuracy,
      scoreGrader: t.score,
      scoreMeasured: floatAccuracy === null ? null : rescale(t.accuracy, floor, floatAccuracy),
      floatScoreGrader: floatAccuracy === null ? null : normalisedScore(t.benchmark, floatAccuracy),
    };
  });
  const mean = (xs: Array<number | null>): number | null => {
    const v = xs.filter((x): x is number => x !== null);
    return v.length === 0 ? null : v.reduce((a, b) => a + b, 0) / v.length;
  };
  return { rows, meanGrader: mean(rows.map((r) => r.scoreGrader)) ?? 0, meanMeasured: mean(rows.map((r) => r.scoreMeasured)) };
}

/** The predicted grade as Markdown. */
export function formatGrade(g: Grade): string {
  const pct = (x: number | null): string => (x === null ? '-' : x.toFixed(1));
  const acc = (x: number | null): string => (x === null ? '-' : x.toFixed(3));
  const head = '| benchmark | chance | ternary | float (measured ceiling) | grader ceiling | score (grader ceiling) | score (measured ceiling) | float scored by the grader |';
  const rule = '|---|---:|---:|---:|---:|---:|---:|---:|';
  const lines = g.rows.map((r) => `| ${r.benchmark} | ${acc(r.floor)} | ${acc(r.ternaryAccuracy)} | ${acc(r.floatAccuracy)} | ${acc(r.graderCeiling)} | ${pct(r.scoreGrader)} | ${pct(r.scoreMeasured)} | ${pct(r.floatScoreGrader)} |`);
  return [head, rule, ...lines, '', `predicted grade: ${pct(g.meanGrader)} with the grader's ceilings, ${pct(g.meanMeasured)} with the measured ones`].join('\n');
}
