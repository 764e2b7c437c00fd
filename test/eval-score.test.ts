import { describe, expect, it } from 'vitest';
import { formatGrade, formatTable, normalisedScore, percentile, predictedGrade, tabulate, zeroReason, type QuestionOutcome } from '../lib/eval/score.ts';

describe('normalisedScore', () => {
  it('is (acc - floor) / (ceiling - floor) * 100 with the grader floors and ceilings', () => {
    expect(normalisedScore('gpqa-diamond', 0.4)).toBeCloseTo(((0.4 - 0.25) / (0.571 - 0.25)) * 100, 12);
    expect(normalisedScore('gpqa-diamond', 0.4)).toBeCloseTo(46.728971962616, 9);
    expect(normalisedScore('math-500', 0.433)).toBeCloseTo(50, 12);
    expect(normalisedScore('livecodebench', 0.2125)).toBeCloseTo(50, 12);
    expect(normalisedScore('mmlu-pro', 0.4135)).toBeCloseTo(50, 12);
  });
  it('is 0 at chance and 100 at the bf16 reference', () => {
    expect(normalisedScore('gpqa-diamond', 0.25)).toBe(0);
    expect(normalisedScore('mmlu-pro', 0.111)).toBe(0);
    expect(normalisedScore('math-500', 0)).toBe(0);
    expect(normalisedScore('gpqa-diamond', 0.571)).toBeCloseTo(100, 12);
    expect(normalisedScore('math-500', 0.866)).toBe(100);
    expect(normalisedScore('livecodebench', 0.425)).toBe(100);
    expect(normalisedScore('mmlu-pro', 0.716)).toBeCloseTo(100, 12);
  });
  it('clamps below chance to 0 and above the reference to 100', () => {
    expect(normalisedScore('gpqa-diamond', 0.1)).toBe(0);
    expect(normalisedScore('mmlu-pro', 0.05)).toBe(0);
    expect(normalisedScore('livecodebench', 0.9)).toBe(100);
    expect(normalisedScore('math-500', 1)).toBe(100);
  });
});

describe('percentile', () => {
  it('uses the nearest rank', () => {
    expect(percentile([5, 1, 3, 2, 4], 50)).toBe(3);
    expect(percentile([1, 2, 3, 4], 50)).toBe(2);
    expect(percentile(Array.from({ length: 20 }, (_, i) => i + 1), 95)).toBe(19);
    expect(percentile([7], 95)).toBe(7);
  });
});

describe('zeroReason', () => {
  it('zeroes timeouts, errors and replies cut off at max_tokens', () => {
    expect(zeroReason({ finishReason: 'stop', timedOut: false, error: null })).toBeNull();
    expect(zeroReason({ finishReason: 'length', timedOut: false, error: null })).toBe('truncated');
    expect(zeroReason({ finishReason: null, timedOut: true, error: 'no complete reply within 300000 ms' })).toBe('timeout');
    expect(zeroReason({ finishReason: null, timedOut: false, error: 'HTTP 500' })).toBe('error');
  });
});

function outcome(benchmark: QuestionOutcome['benchmark'], correct: boolean, extra: Partial<QuestionOutcome> = {}): QuestionOutcome {
  return { id: 'q', set: 's', benchmark, correct, extracted: null, finishReason: 'stop', truncated: false, timedOut: false, error: null, completionTokens: 100, latencyMs: 1000, ...extra };
}

describe('tabulate', () => {
  const outcomes: QuestionOutcome[] = [
    outcome('gpqa-diamond', true, { latencyMs: 100, completionTokens: 10 }),
    outcome('gpqa-diamond', false, { latencyMs: 300, completionTokens: 4096, truncated: true, finishReason: 'length' }),
    outcome('gpqa-diamond', false, { latencyMs: 300_000, completionTokens: null, timedOut: true, error: 'no complete reply', finishReason: null }),
    outcome('gpqa-diamond', true, { latencyMs: 200, completionTokens: 20, detail: { fallback: true } }), // the server wrote this content
    outcome('math-500', true),
    outcome('math-500', false, { error: 'HTTP 500', completionTokens: null, finishReason: null }),
  ];
  const table = tabulate(outcomes);
  it('computes one row per benchmark present, in the fixed order', () => {
    expect(table.rows.map((r) => r.benchmark)).toEqual(['gpqa-diamond', 'math-500']);
    expect(table.missing).toEqual(['livecodebench', 'mmlu-pro']);
    const [g, m] = table.rows as [(typeof table.rows)[0], (typeof table.rows)[0]];
    expect(g).toEqual({
      benchmark: 'gpqa-diamond',
      questions: 4,
      correct: 2,
      accuracy: 0.5,
      score: ((0.5 - 0.25) / (0.571 - 0.25)) * 100,
      truncations: 1,
      timeouts: 1,
      errors: 0,
      fallbacks: 1,
      meanCompletionTokens: (10 + 4096 + 20) / 3,
      p50LatencyMs: 200,
      p95LatencyMs: 300_000,
    });
    expect(m).toMatchObject({ questions: 2, correct: 1, accuracy: 0.5, score: (0.5 / 0.866) * 100, errors: 1, meanCompletionTokens: 100 });
    expect(table.meanScore).toBeCloseTo((((0.5 - 0.25) / 0.321) * 100 + (0.5 / 0.866) * 100) / 2, 12);
  });
  it('formats a Markdown table with the mean', () => {
    const text = formatTable(table);
    expect(text.split('\n')[2]).toBe('| gpqa-diamond | 4 | 2 | 0.500 | 77.9 | 1 | 1 | 0 | 1 | 1375 | 0.20 | 300.00 |');
    expect(text.split('\n').at(-1)).toBe('mean normalised score: 67.8 (over 2 of 4 benchmarks; missing: livecodebench, mmlu-pro)');
  });
  it('averages over all four benchmarks when all are present', () => {
    const all = tabulate([outcome('gpqa-diamond', true), outcome('math-500', false), outcome('livecodebench', true), outcome('mmlu-pro', false)]);
    expect(all.missing).toEqual([]);
    expect(all.meanScore).toBe((100 + 0 + 100 + 0) / 4);
  });
});

describe('predictedGrade', () => {
  const many = (benchmark: QuestionOutcome['benchmark'], right: number, n: number): QuestionOutcome[] => Array.from({ length: n }, (_, i) => outcome(benchmark, i < right));
  it("rescales each benchmark from chance to the grader's ceiling and to the measured one", () => {
    const ternary = tabulate([...many('gpqa-diamond', 2, 5), ...many('math-500', 3, 5)]);
    const float = tabulate([...many('gpqa-diamond', 3, 5), ...many('math-500', 4, 5)]);
    const g = predictedGrade(ternary, float);
    expect(g.rows.map((r) => [r.benchmark, r.ternaryAccuracy, r.floatAccuracy])).toEqual([['gpqa-diamond', 0.4, 0.6], ['math-500', 0.6, 0.8]]);
    expect(g.rows[0]!.scoreMeasured).toBeCloseTo(((0.4 - 0.25) / (0.6 - 0.25)) * 100, 12);
    expect(g.rows[1]!.scoreMeasured).toBeCloseTo(75, 12);
    expect(g.rows[0]!.scoreGrader).toBe(normalisedScore('gpqa-diamond', 0.4));
    expect(g.rows[1]!.floatScoreGrader).toBe(normalisedScore('math-500', 0.8));
    expect(g.meanMeasured).toBeCloseTo((g.rows[0]!.scoreMeasured! + 75) / 2, 12);
    expect(formatGrade(g).split('\n').at(-1)).toBe(`predicted grade: ${g.meanGrader.toFixed(1)} with the grader's ceilings, ${g.meanMeasured!.toFixed(1)} with the measured ones`);
  });
  it('a measured ceiling at or below chance gives no measured score, and that benchmark leaves the mean', () => {
    const g = predictedGrade(tabulate([...many('gpqa-diamond', 1, 4), ...many('math-500', 1, 2)]), tabulate([...many('gpqa-diamond', 1, 4), ...many('math-500', 2, 2)]));
    expect(g.rows.map((r) => r.scoreMeasured)).toEqual([null, 50]);
    expect(g.meanMeasured).toBe(50);
  });
});
