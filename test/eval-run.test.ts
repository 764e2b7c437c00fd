/**
 * End to end on the project's own question files: runEval against a real HTTP server with canned
 * replies (right, wrong, cut off at max_tokens, hanging past the deadline, code that passes, code that
 * loops), then the exact table; and the sweep, which refuses evaluation data before asking anything.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runWorker } from '../engine/worker.ts';
import { workerMathVerifier } from '../lib/eval/math-verify.ts';
import { loadQuestionSets, questionFiles, type LoadedSet } from '../lib/eval/questions.ts';
import { engineSchemaSet } from '../engine/json-io.ts';
import { EVAL_OUTPUTS, runEval, type EvalReport } from '../lib/eval/run.ts';
import { normalisedScore } from '../lib/eval/score.ts';
import { requestFieldMeasure, sweep } from '../lib/eval/sweep.ts';
import { startCannedServer, type CannedServer } from './eval-canned-server.ts';

const root = join(import.meta.dirname, '..');
async function load(dir: string): Promise<LoadedSet[]> {
  const r = await loadQuestionSets((await questionFiles(join(root, dir))).map((f) => f.slice(root.length + 1)), root);
  if (!r.ok) throw new Error(JSON.stringify(r.error));
  return r.value;
}

const tmp = mkdtempSync(join(tmpdir(), 'ternforge-eval-run-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
/** math-verify through the real worker (python/ternforge/mathcheck.py), as the eval stage runs it. */
const mathVerify = workerMathVerifier({
  worker: (c, cfg) => runWorker({ stage: 'eval', python: join(process.env.TERNFORGE_VENV || join(root, '.ternforge', 'venv'), 'bin', 'python'), root, tmpDir: tmp, signal: new AbortController().signal, log: () => {} }, c, cfg),
});

const fence = (code: string): string => `Here is my solution.\n\`\`\`python\n${code}\`\`\``;

describe('runEval on data/eval', () => {
  let server: CannedServer;
  let report: EvalReport;
  beforeAll(async () => {
    server = await startCannedServer([
      // gpqa-style: right, wrong, right but cut off, right but too late; the other two fall back to no answer
      { match: 'compressed adiabatically', content: 'T V^(2/3) is constant.\nAnswer: A' },
      { match: 'net dipole moment', content: 'Answer: B' },
      { match: 'wavelength of 500 nm', content: 'E = 1240/500 = 2.48 eV. Answer: B', finishReason: 'length', completionTokens: 4096 },
      { match: 'Aa x Aa', content: 'Answer: D', delayMs: 5000 },
      // mmlu-pro-style: one right
      { match: '15% of 240', content: 'The answer is (E).', completionTokens: 30 },
      // math-style (scored by math-verify): equivalent forms count; an inequality for an interval does not
      { match: 'Simplify $\\sqrt{72}$', content: 'So $\\boxed{\\sqrt{72}}$... no: $\\boxed{6 \\sqrt 2}$.' },
      { match: 'x^2 - 5x + 6', content: '$x = \\boxed{3, 2}$' },
      { match: '2x - 3 > 5', content: '\\boxed{x > 4}' },
      { match: 'sum of 7 with two fair', content: '\\boxed{\\frac{1}{6}}', finishReason: 'length' },
      { match: 'sum of the first 20', content: '\\boxed{200}' },
      // code-style: a right stdin program, a right functional one, an infinite loop
      { match: 'sum of the even integers', content: fence('n = int(input())\nprint(sum(x for x in map(int, input().split()) if x % 2 == 0))\n') },
      { match: 'longest strictly increasing', content: fence('class Solution:\n    def longestIncreasingRun(self, nums):\n        b = r = 1\n        for x, y in zip(nums, nums[1:]):\n            r = r + 1 if y > x else 1\n            b = max(b, r)\n        return b\n') },
      { match: 'occurs most often', content: fence('while True:\n    pass\n') },
    ]);
    report = await runEval({ baseUrl: server.url, sets: await load('data/eval'), timeoutMs: 1500, sandbox: { timeLimitMs: 1500 }, mathVerify });
  });
  afterAll(() => server.close());

  it("sends every question once with the grader's settings", () => {
    expect(server.bodies).toHaveLength(24);
    expect(new Set(server.bodies.map((b) => `${b.max_tokens}/${b.temperature}`))).toEqual(new Set(['4096/0']));
    expect(report.settings).toMatchObject({ concurrency: 16, maxTokens: 4096, temperature: 0, timeoutMs: 1500 });
    expect(report.sets.map((s) => [s.name, s.role, s.questions])).toEqual([
      ['project-gpqa-style', 'evaluation', 6],
      ['project-livecodebench-style', 'evaluation', 4],
      ['project-math-500-style', 'evaluation', 8],
      ['project-mmlu-pro-style', 'evaluation', 6],
    ]);
  });

  it('produces the exact table', () => {
    const rows = Object.fromEntries(report.table.rows.map((r) => [r.benchmark, r]));
    expect(rows['gpqa-diamond']).toMatchObject({ questions: 6, correct: 1, truncations: 1, timeouts: 1, errors: 0, score: 0 });
    expect(rows['math-500']).toMatchObject({ questions: 8, correct: 2, truncations: 1, timeouts: 0, score: normalisedScore('math-500', 2 / 8) });
    expect(rows['livecodebench']).toMatchObject({ questions: 4, correct: 2, score: 100 });
    expect(rows['mmlu-pro']).toMatchObject({ questions: 6, correct: 1, score: normalisedScore('mmlu-pro', 1 / 6) });
    expect(report.table.meanScore).toBeCloseTo((0 + normalisedScore('math-500', 2 / 8) + 100 + normalisedScore('mmlu-pro', 1 / 6)) / 4, 12);
    expect(rows['gpqa-diamond']!.p95LatencyMs).toBeGreaterThanOrEqual(1490);
    expect(report.sandbox?.timeLimitMs).toBe(1500);
    // What the eval stage writes as eval.json: timeouts, truncations and the code sandbox all on the schema.
    expect(engineSchemaSet().validate(EVAL_OUTPUTS.report.schema, report)).toEqual([]);
  });

  it('zeroes truncated and timed-out replies even when their answer is right', () => {
    const byId = Object.fromEntries(report.questions.map((q) => [q.id, q]));
    expect(byId.g3).toMatchObject({ extracted: 'B', truncated: true, correct: false });
    expect(byId.g4).toMatchObject({ timedOut: true, correct: false, extracted: null });
    expect(byId.a4).toMatchObject({ extracted: '\\frac{1}{6}', truncated: true, correct: false });
    expect(byId.a2).toMatchObject({ extracted: '6 \\sqrt{2}', correct: true });
    // math-verify: an inequality is not the interval the question asked for (python/tests/data/math_cases.json)
    expect(byId.a6).toMatchObject({ extracted: 'x > 4', correct: false });
    expect(byId.c2).toMatchObject({ extracted: 'time-limit', correct: false });
    expect(byId.c3).toMatchObject({ extracted: 'passed', correct: true });
    expect(byId.c4).toMatchObject({ extracted: 'no-code', correct: false });
  });
});

describe('sweep', () => {
  it('refuses evaluation data before sending anything', async () => {
    const server = await startCannedServer([]);
    try {
      const sets = [...(await load('data/selection')), ...(await load('data/eval'))];
      const r = await sweep({ parameter: 'reasoning_budget', values: [256, 1024], sets, measure: requestFieldMeasure({ baseUrl: server.url, mathVerify }, 'reasoning_budget') });
      expect(r).toEqual({
        ok: false,
        error: { reason: 'eval-role-refused', path: 'data/eval/gpqa-style.json', set: 'project-gpqa-style', role: 'evaluation', allowed: ['selection'] },
      });
      expect(server.bodies).toHaveLength(0);
    } finally {
      await server.close();
    }
  });

  it('rejects empty or repeated values', async () => {
    const sets = await load('data/selection');
    const measure = (): Promise<EvalReport> => Promise.reject(new Error('not reached'));
    expect(await sweep({ parameter: 'b', values: [], sets, measure })).toEqual({ ok: false, error: { reason: 'sweep-invalid', parameter: 'b', detail: 'no values to measure' } });
    expect(await sweep({ parameter: 'b', values: [1, 1], sets, measure })).toEqual({ ok: false, error: { reason: 'sweep-invalid', parameter: 'b', detail: 'repeated value in [1,1]' } });
  });

  it('measures each value on selection data and chooses the best', async () => {
    // The server answers multiple-choice questions right only when the budget is 1024.
    const { createServer } = await import('node:http');
    const server = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        const b = JSON.parse(body) as { reasoning_budget: number; messages: Array<{ content: string }> };
        const p = b.messages[0]!.content;
        const answers: Record<string, string> = { 'electrical resistance': 'B', electronegativity: 'D', 'dropped from rest': 'A', adenine: 'C', '7 multiplied': 'B', 'closest to the Sun': 'F', 'CPU stand': 'I' };
        const letter = Object.entries(answers).find(([k]) => p.includes(k))?.[1];
        const content = letter !== undefined && b.reasoning_budget === 1024 ? `Answer: ${letter}` : 'Answer: A';
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ choices: [{ message: { content }, finish_reason: b.reasoning_budget === 256 ? 'length' : 'stop' }], usage: { completion_tokens: b.reasoning_budget } }));
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    try {
      const url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
      const sets = (await load('data/selection')).filter((s) => s.set.questions[0]!.kind === 'choice');
      const r = await sweep({ parameter: 'reasoning_budget', values: [256, 1024, 4096], sets, measure: requestFieldMeasure({ baseUrl: url, mathVerify }, 'reasoning_budget') });
      if (!r.ok) throw new Error(JSON.stringify(r.error));
      expect(r.value.chosen).toBe(1024);
      expect(r.value.points.map((p) => [p.value, p.truncations, p.meanCompletionTokens])).toEqual([
        [256, 7, 256],
        [1024, 0, 1024],
        [4096, 0, 4096],
      ]);
      expect(r.value.points[1]!.meanAccuracy).toBe(1);
      expect(r.value.points[1]!.meanScore).toBe(100);
      // 4096 answers A everywhere: right only on s-g3, so 1 of 4 and 0 of 3.
      expect(r.value.points[2]!.meanAccuracy).toBe((1 / 4 + 0) / 2);
      expect(r.value.sets.map((s) => s.role)).toEqual(['selection', 'selection']);
      expect(engineSchemaSet().validate(EVAL_OUTPUTS.sweep.schema, r.value)).toEqual([]);
    } finally {
      await new Promise<void>((r) => server.close(() => r()));
    }
  });
});
