/**
 * The harness path (lib/eval/harness.ts) end to end with the real lm-eval 0.4.13 and math-verify: the project's
 * question sets written as the benchmarks' rows, lm-eval's own tasks asking a real HTTP server (canned replies,
 * so the right answer, a cut reply, a late one and a failed one are each known) through the recorder, and the
 * grader's rule applied to lm-eval's per-sample scores. The eval stage on tiny (eval-stage.test.ts) runs the
 * same path against the served submission.
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { runWorker } from '../engine/worker.ts';
import { runHarness } from '../lib/eval/harness.ts';
import { readEvalData, realData, setSummary, writeBenchmarkData } from '../lib/eval/harness-data.ts';
import { loadQuestionSets, type LoadedSet } from '../lib/eval/questions.ts';
import { startRecorder } from '../lib/eval/recorder.ts';
import type { EvalReport } from '../lib/eval/run.ts';
import type { Result } from '../engine/result.ts';
import { startCannedServer, type CannedServer } from './eval-canned-server.ts';

const REPO = join(import.meta.dirname, '..');
const PYTHON = join(process.env.TERNFORGE_VENV || join(REPO, '.ternforge', 'venv'), 'bin', 'python');
const SETS = ['gpqa-style', 'math-500-style', 'mmlu-pro-style', 'livecodebench-style'].map((n) => `data/eval/${n}.json`);
const tmp = mkdtempSync(join(tmpdir(), 'ternforge-harness-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

function unwrap<T>(r: Result<T, unknown>): T {
  if (!r.ok) throw new Error(JSON.stringify(r.error));
  return r.value;
}

let sets: LoadedSet[];
beforeAll(async () => {
  const loaded = await loadQuestionSets(SETS, REPO);
  if (!loaded.ok) throw new Error(JSON.stringify(loaded.error));
  sets = loaded.value;
});

describe('benchmark rows from project-written sets', () => {
  test("each set becomes its benchmark's dataset columns, with every item's id", () => {
    const { data, origin } = unwrap(writeBenchmarkData(sets, join(tmp, 'rows')));
    expect(data.map((d) => [d.benchmark, Object.keys(d.files)])).toEqual([
      ['gpqa-diamond', ['train']],
      ['math-500', ['test']],
      ['mmlu-pro', ['test']],
      ['livecodebench', ['test']],
    ]);
    const rows = (b: string): Array<Record<string, unknown>> => {
      const d = data.find((x) => x.benchmark === b)!;
      return readFileSync(Object.values(d.files)[0]![0]!, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    };
    expect(Object.keys(rows('gpqa-diamond')[0]!).sort()).toEqual(['Correct Answer', 'Incorrect Answer 1', 'Incorrect Answer 2', 'Incorrect Answer 3', 'Question', 'Record ID']);
    expect(rows('gpqa-diamond')[0]!['Correct Answer']).toBe('2^(2/3)'); // g1's answer A
    expect(rows('mmlu-pro')[0]).toMatchObject({ question_id: 'm1', answer: 'C', answer_index: 2, category: 'math' });
    expect(rows('math-500')[0]).toMatchObject({ unique_id: 'a1', answer: '210', solution: 'The answer is $\\boxed{210}$.' });
    const lcb = rows('livecodebench')[0]!;
    expect(JSON.parse(String(lcb.public_test_cases))[0]).toEqual({ input: '5\n1 2 3 4 5\n', output: '6\n', testtype: 'stdin' });
    expect(origin.get('mmlu-pro/m1')).toBe('project-mmlu-pro-style');
    expect(origin.size).toBe(sets.reduce((n, s) => n + s.set.questions.length, 0));
  });

  test('two items of one benchmark with the same id, or an MMLU-Pro item with no category, are refused', () => {
    const twice = [sets[1]!, { ...sets[1]!, path: 'copy.json' }];
    expect(writeBenchmarkData(twice, join(tmp, 'dup'))).toEqual({ ok: false, error: { reason: 'eval-question-invalid', path: 'copy.json', id: 'a1', detail: expect.stringMatching(/^item a1 has the id of an item of project-math-500-style/) } });
    expect(existsSync(join(tmp, 'dup')), 'nothing written').toBe(false);
    const mmlu = sets[2]!;
    const noCategory = { ...mmlu, set: { ...mmlu.set, questions: mmlu.set.questions.map((q) => ({ ...q, category: undefined })) } } as LoadedSet;
    expect(writeBenchmarkData([noCategory], join(tmp, 'nocat'))).toMatchObject({ ok: false, error: { reason: 'eval-question-invalid', id: 'm1', detail: expect.stringMatching(/^mmlu-pro item m1 of project-mmlu-pro-style has no category/) } });
  });
});

describe("fetch-eval's real splits", () => {
  const sha = (c: string): string => c.repeat(64);
  const index = (role: string) => ({
    version: 1,
    sources: [{ name: 'mmlu-pro', benchmark: 'mmlu-pro', dataset: 'TIGER-Lab/MMLU-Pro', commit: 'a'.repeat(40), format: 'parquet', role, splits: { test: [{ path: 'mmlu-pro/data/test.parquet', sha256: sha('1') }], validation: [{ path: 'mmlu-pro/data/validation.parquet', sha256: sha('2') }] } }],
  });
  test('become the worker input (absolute files by split) and a benchmark set of role evaluation', () => {
    const dir = join(tmp, 'fetch-eval');
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'eval-data.json'), JSON.stringify(index('evaluation')));
    const { data, sets: named } = realData(unwrap(readEvalData(dir)), dir);
    expect(data).toEqual([{ benchmark: 'mmlu-pro', format: 'parquet', files: { test: [join(dir, 'mmlu-pro/data/test.parquet')], validation: [join(dir, 'mmlu-pro/data/validation.parquet')] } }]);
    expect(named[0]).toMatchObject({ name: 'mmlu-pro', path: `TIGER-Lab/MMLU-Pro@${'a'.repeat(40)}`, role: 'evaluation', source: { kind: 'benchmark', dataset: 'TIGER-Lab/MMLU-Pro', split: 'test,validation' } });
  });
  test('an index that gives benchmark data another role is refused', () => {
    const dir = join(tmp, 'fetch-eval-bad');
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'eval-data.json'), JSON.stringify(index('calibration')));
    const refused = readEvalData(dir);
    expect(refused).toMatchObject({ ok: false, error: { reason: 'evidence-record-invalid', stage: 'fetch-eval', path: join(dir, 'eval-data.json') } });
    expect(JSON.stringify(refused)).toMatch(/role/);
    writeFileSync(join(dir, 'eval-data.json'), '{"version": 1, "sources": [');
    expect(readEvalData(dir)).toMatchObject({ ok: false, error: { reason: 'evidence-record-invalid', errors: [expect.stringMatching(/JSON/)] } });
  });
});

describe('the recorder', () => {
  test('passes a reply through byte for byte and answers a failure with an empty reply it records as such', async () => {
    const upstream = await startCannedServer([{ match: 'ok', content: 'fine', finishReason: 'length', completionTokens: 7 }, { match: 'boom', content: null, status: 503 }]);
    const rec = await startRecorder({ upstream: upstream.url, timeoutMs: 5000 });
    try {
      const ask = (text: string) => fetch(`${rec.url}/v1/chat/completions`, { method: 'POST', body: JSON.stringify({ messages: [{ role: 'user', content: text }], max_tokens: 9 }) }).then(async (r) => ({ status: r.status, body: await r.json() }));
      const ok = await ask('ok');
      expect(ok.status).toBe(200);
      expect(ok.body.choices[0]).toMatchObject({ message: { content: 'fine' }, finish_reason: 'length' });
      const boom = await ask('boom');
      expect(boom.status).toBe(200);
      expect(boom.body.choices[0].message.content).toBe('');
      expect(boom.body.ternforge_recorder.error).toMatch(/HTTP 503/);
      expect(rec.records.map((r) => [r.maxTokens, r.completion.finishReason, r.completion.usage?.completionTokens ?? null, r.completion.error === null])).toEqual([
        [9, 'length', 7, true],
        [9, null, null, false],
      ]);
      const notChat = await fetch(`${rec.url}/v1/completions`, { method: 'POST', body: '{}' });
      expect(notChat.status).toBe(404);
    } finally {
      await rec.close();
      await upstream.close();
    }
  });
});

describe('lm-eval through the recorder, scored by the grader', () => {
  let server: CannedServer;
  let report: EvalReport;
  const out = join(tmp, 'kept');
  const workerLog: string[] = [];
  const progress: string[] = [];
  beforeAll(async () => {
    server = await startCannedServer([
      { match: 'sum of the first 20 positive integers', content: 'Adding pairs: 20 * 21 / 2. The answer is $\\boxed{210}$.' },
      { match: 'Simplify $\\sqrt{72}$', content: '$\\boxed{6\\sqrt{2}}$', finishReason: 'length' },
      { match: 'derivative of x^3', content: 'Power rule. The answer is (C).' },
      { match: 'organelle', content: 'the answer is (A)', delayMs: 4000 },
      { match: 'price of a good rises', content: null, status: 500 },
      { match: 'sum of the even integers', content: '```python\nn = int(input())\nprint(sum(x for x in map(int, input().split()) if x % 2 == 0))\n```' },
    ]);
    const { data, origin } = unwrap(writeBenchmarkData(sets, join(tmp, 'data')));
    const opts = { stage: 'eval', python: PYTHON, root: REPO, tmpDir: tmp, signal: new AbortController().signal, log: (l: string) => workerLog.push(l) };
    const r = await runHarness({
      baseUrl: server.url,
      data,
      sets: sets.map(setSummary),
      origin,
      worker: { worker: (c, cfg) => runWorker(opts, c, cfg) },
      scratch: join(tmp, 'scratch'),
      keep: { dir: out, keptAs: 'lm-eval/test', places: [[tmp, '<tmp>']] },
      concurrency: 4,
      maxTokens: 64,
      timeoutMs: 2000,
      model: 'canned',
      log: (l) => progress.push(l),
    });
    if (!r.ok) throw new Error(JSON.stringify(r.error));
    report = r.value;
  }, 240_000);
  afterAll(() => server.close());

  const outcome = (id: string) => report.questions.find((q) => q.id === id)!;

  test('every item was asked once, by lm-eval, with the run settings, and joined back to its request', () => {
    expect(report.questions.length).toBe(24);
    expect(report.harness).toMatchObject({ lmEval: '0.4.13', mathVerify: '0.9.0', requests: 24, unmatched: 0 });
    expect(server.bodies.length).toBe(24);
    expect(server.bodies.every((b) => b.max_tokens === 64 && b.temperature === 0)).toBe(true);
    expect(report.harness!.tasks.map((t) => [t.benchmark, t.referenceTask, t.filter, t.metric])).toEqual([
      ['gpqa-diamond', 'gpqa_diamond_cot_zeroshot', 'flexible-extract', 'exact_match'],
      ['math-500', 'minerva_math500', 'none', 'math_verify'],
      ['mmlu-pro', 'mmlu_pro', 'custom-extract', 'exact_match'],
      ['livecodebench', null, 'none', 'nonempty'],
    ]);
    for (const f of report.harness!.files) {
      const kept = readFileSync(join(out, f.replace('lm-eval/test/', '')), 'utf8');
      expect(kept.includes(tmp), f).toBe(false); // the scratch paths lm-eval wrote are named, not kept
    }
    expect(report.harness!.argv).toContain('<tmp>/scratch/work/tasks');
  });

  test("progress comes from the recorded requests, and lm-eval's progress bars stay out of the log", () => {
    expect(progress.at(-1)).toBe('lm-eval: 24 requests answered (1 cut at max_tokens, 1 past the deadline, 1 failed)');
    expect(workerLog.some((l) => l.includes('harness: '))).toBe(true); // the worker's log did reach us
    expect(workerLog.filter((l) => /\d+%\|| \d+\/\d+ \[\d/.test(l))).toEqual([]);
  });

  test("lm-eval's scorers decide a reply that came back whole; the sandbox runs the code", () => {
    expect(outcome('a1')).toMatchObject({ correct: true, truncated: false });
    expect(outcome('m1')).toMatchObject({ correct: true, extracted: 'C' });
    expect(outcome('c1')).toMatchObject({ correct: true, extracted: 'passed' });
    expect(outcome('a3')).toMatchObject({ correct: false }); // the canned fallback 'I am not sure.'
  });

  test('a reply cut at max_tokens, past the deadline or failed scores zero whatever lm-eval made of it, and is counted apart', () => {
    const cut = outcome('a2');
    expect(cut).toMatchObject({ correct: false, truncated: true, finishReason: 'length' });
    expect((cut.detail as { lmEval: { math_verify: number } }).lmEval.math_verify).toBe(1); // right, but cut
    expect(outcome('m2')).toMatchObject({ correct: false, timedOut: true });
    expect(outcome('m2').latencyMs).toBeGreaterThanOrEqual(1900);
    expect(outcome('m3')).toMatchObject({ correct: false, timedOut: false });
    expect(outcome('m3').error).toMatch(/HTTP 500/);
    const row = (b: string) => report.table.rows.find((r) => r.benchmark === b)!;
    expect(row('math-500')).toMatchObject({ questions: 8, correct: 1, truncations: 1 });
    expect(row('mmlu-pro')).toMatchObject({ questions: 6, correct: 1, timeouts: 1, errors: 1 });
    // lm-eval's own aggregate counts the cut reply right: 2 of 8
    expect(report.harness!.tasks.find((t) => t.benchmark === 'math-500')!.lmEvalValue).toBe(0.25);
  });
});
