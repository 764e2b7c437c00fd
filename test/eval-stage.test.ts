/** The eval stage end to end on tiny: the shared build (test/global-setup.ts) served the emitted submission and scored it. */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';
import type { EvalReport } from '../lib/eval/run.ts';

const workdir = process.env.TERNFORGE_TINY_BUILD;

describe.skipIf(workdir === undefined)('eval on tiny', () => {
  test('asks every question of data/eval and writes the per-benchmark table', () => {
    const out = join(workdir!, '.ternforge', 'tiny', 'eval', 'outputs');
    const report = JSON.parse(readFileSync(join(out, 'eval.json'), 'utf8')) as EvalReport;
    expect(report.table.rows.map((r) => r.benchmark).sort()).toEqual(['gpqa-diamond', 'livecodebench', 'math-500', 'mmlu-pro']);
    expect(report.questions.length).toBe(report.sets.reduce((n, s) => n + s.questions, 0));
    expect(report.sets.every((s) => s.role === 'evaluation')).toBe(true);
    // Every reply came back (a random model runs to max_tokens: truncated, never timed out or failed).
    expect(report.questions.every((q) => q.timedOut === false && q.error === null)).toBe(true);
    expect(report.settings.maxTokens).toBe(32);
    for (const q of report.questions) expect(q.completionTokens).toBeLessThanOrEqual(32);
    const table = readFileSync(join(out, 'eval.md'), 'utf8');
    expect(table).toMatch(/\| benchmark \| n \| correct \| accuracy \| score \|/);
    expect(table).toMatch(/mean normalised score: /);
  });
});
