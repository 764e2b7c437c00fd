/** The eval stage end to end on tiny: the shared build (test/global-setup.ts) served the emitted submission and scored it. */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';
import type { EvalReport } from '../lib/eval/run.ts';

const workdir = process.env.TERNFORGE_TINY_BUILD;

describe.skipIf(workdir === undefined)('eval on tiny', () => {
  test('asks every question of data/eval through lm-eval, of the submission and of the float model, and writes the tables', () => {
    const out = join(workdir!, '.ternforge', 'tiny', 'eval', 'outputs');
    const report = JSON.parse(readFileSync(join(out, 'eval.json'), 'utf8')) as EvalReport;
    expect(report.table.rows.map((r) => r.benchmark).sort()).toEqual(['gpqa-diamond', 'livecodebench', 'math-500', 'mmlu-pro']);
    expect(report.questions.length).toBe(report.sets.reduce((n, s) => n + s.questions, 0));
    expect(report.sets.every((s) => s.role === 'evaluation')).toBe(true);
    // Every reply came back (a random model runs to max_tokens: truncated, never timed out or failed).
    expect(report.questions.every((q) => q.timedOut === false && q.error === null)).toBe(true);
    expect(report.settings.maxTokens).toBe(32);
    for (const q of report.questions) expect(q.completionTokens).toBeLessThanOrEqual(32);
    // Asked and scored by lm-eval: its own tasks, its files kept, every request joined back to its sample.
    expect(report.harness).toMatchObject({ lmEval: '0.4.13', mathVerify: '0.9.0', requests: report.questions.length, unmatched: 0 });
    expect(Object.fromEntries(report.harness!.tasks.map((t) => [t.benchmark, t.referenceTask]))).toEqual({ 'gpqa-diamond': 'gpqa_diamond_cot_zeroshot', 'math-500': 'minerva_math500', 'mmlu-pro': 'mmlu_pro', livecodebench: null });
    for (const f of report.harness!.files) expect(existsSync(join(out, f)), f).toBe(true);
    expect(report.harness!.files.filter((f) => /results_.*\.json$/.test(f))).toHaveLength(1);
    // The same run against the float model is the measured ceiling; the grade holds both normalisations.
    const float = JSON.parse(readFileSync(join(out, 'eval-float.json'), 'utf8')) as EvalReport;
    expect(float.questions.length).toBe(report.questions.length);
    expect(report.grade!.rows.map((r) => [r.benchmark, r.floatAccuracy])).toEqual(float.table.rows.map((r) => [r.benchmark, r.accuracy]));
    const table = readFileSync(join(out, 'eval.md'), 'utf8');
    expect(table).toMatch(/predicted grade: /);
    expect(table).toMatch(/\| benchmark \| n \| correct \| accuracy \| score \|/);
    expect(table).toMatch(/mean normalised score: /);
  });
});
