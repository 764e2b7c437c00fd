/**
 * The question sets the project writes itself (data/eval, data/selection): each loads through the
 * schema and the semantic checks, declares the right role, and is answerable: math references are
 * self-equivalent and every code question's tests pass with a reference solution kept here.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runCode } from '../lib/eval/code-sandbox.ts';
import { runWorker } from '../engine/worker.ts';
import { workerMathVerifier } from '../lib/eval/math-verify.ts';
import { loadQuestionSet, loadQuestionSets, questionFiles, type LoadedSet } from '../lib/eval/questions.ts';

const root = join(import.meta.dirname, '..');

const REFERENCE_CODE: Record<string, string> = {
  c1: 'n = int(input())\nprint(sum(x for x in map(int, input().split()) if x % 2 == 0))\n',
  c2: 'from collections import Counter\nc = Counter(input().strip())\nm = max(c.values())\nprint(min(k for k, v in c.items() if v == m))\n',
  c3: 'class Solution:\n    def longestIncreasingRun(self, nums: List[int]) -> int:\n        best = run = 1\n        for a, b in zip(nums, nums[1:]):\n            run = run + 1 if b > a else 1\n            best = max(best, run)\n        return best\n',
  c4: 'class Solution:\n    def palindromes(self, words: List[str]) -> List[str]:\n        return [w for w in words if w == w[::-1]]\n',
  's-c1': 'a, b = map(int, input().split())\nprint(a * b)\n',
  's-c2': 'class Solution:\n    def reverse(self, s: str) -> str:\n        return s[::-1]\n',
};

async function loadDir(dir: string): Promise<LoadedSet[]> {
  const files = await questionFiles(join(root, dir));
  const r = await loadQuestionSets(files.map((f) => f.slice(root.length + 1)), root);
  if (!r.ok) throw new Error(JSON.stringify(r.error));
  return r.value;
}

describe('project question sets', () => {
  it('data/eval: one set per benchmark, role evaluation, project-written', async () => {
    const sets = await loadDir('data/eval');
    expect(sets.map((s) => s.set.benchmark).sort()).toEqual(['gpqa-diamond', 'livecodebench', 'math-500', 'mmlu-pro']);
    expect(new Set(sets.map((s) => s.set.role))).toEqual(new Set(['evaluation']));
    expect(new Set(sets.map((s) => s.set.source.kind))).toEqual(new Set(['project-written']));
    const gpqa = sets.find((s) => s.set.benchmark === 'gpqa-diamond')!;
    expect(gpqa.set.questions.every((q) => q.kind === 'choice' && q.options.length === 4)).toBe(true);
    const mmlu = sets.find((s) => s.set.benchmark === 'mmlu-pro')!;
    expect(mmlu.set.questions.every((q) => q.kind === 'choice' && q.options.length === 10)).toBe(true);
  });

  it('data/selection: role selection only, disjoint from data/eval', async () => {
    const sel = await loadDir('data/selection');
    const ev = await loadDir('data/eval');
    expect(new Set(sel.map((s) => s.set.role))).toEqual(new Set(['selection']));
    const text = (sets: LoadedSet[]): Set<string> =>
      new Set(sets.flatMap((s) => s.set.questions.map((q) => (q.kind === 'choice' ? q.question : q.problem))));
    const evalTexts = text(ev);
    expect([...text(sel)].filter((t) => evalTexts.has(t))).toEqual([]);
  });

  it('math references are self-equivalent under math-verify (they parse)', async () => {
    const math = [...(await loadDir('data/eval')), ...(await loadDir('data/selection'))].flatMap((s) => s.set.questions.filter((q) => q.kind === 'math'));
    const tmp = mkdtempSync(join(tmpdir(), 'ternforge-eval-data-'));
    try {
      const python = join(process.env.TERNFORGE_VENV || join(root, '.ternforge', 'venv'), 'bin', 'python');
      const verify = workerMathVerifier({ worker: (c, cfg) => runWorker({ stage: 'eval', python, root, tmpDir: tmp, signal: new AbortController().signal, log: () => {} }, c, cfg) });
      const r = await verify(math.map((q) => ({ reply: `\\boxed{${q.answer}}`, reference: q.answer })));
      if (!r.ok) throw new Error(JSON.stringify(r.error));
      expect(math.filter((_, i) => !r.value[i]!.correct).map((q) => q.id)).toEqual([]);
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  });

  it('every code question passes with its reference solution', async () => {
    const sets = [...(await loadDir('data/eval')), ...(await loadDir('data/selection'))];
    const code = sets.flatMap((s) => s.set.questions.filter((q) => q.kind === 'code'));
    expect(code.map((q) => q.id).sort()).toEqual(Object.keys(REFERENCE_CODE).sort());
    for (const q of code) {
      const r = await runCode(REFERENCE_CODE[q.id]!, q, { timeLimitMs: 4000 });
      expect([q.id, r.verdict, r.tests.length]).toEqual([q.id, 'passed', q.tests.length]);
    }
  });
});

describe('loadQuestionSet', () => {
  const write = async (value: unknown): Promise<string> => {
    const dir = await mkdtemp(join(tmpdir(), 'ternforge-qset-'));
    const p = join(dir, 'set.json');
    await writeFile(p, JSON.stringify(value));
    return p;
  };
  const base = {
    name: 'x',
    role: 'selection',
    benchmark: 'gpqa-diamond',
    source: { kind: 'project-written', description: 'test' },
    questions: [{ id: 'q1', kind: 'choice', question: 'Q?', options: ['a', 'b', 'c', 'd'], answer: 'B' }],
  };

  it('accepts a valid set and hashes its bytes', async () => {
    const r = await loadQuestionSet(await write(base));
    expect(r.ok && r.value.sha256).toMatch(/^[0-9a-f]{64}$/);
  });
  it('refuses benchmark items or test splits with any role but evaluation (schema)', async () => {
    const bench = await loadQuestionSet(await write({ ...base, source: { kind: 'benchmark', description: 'GPQA', dataset: 'Idavidrein/gpqa' } }));
    expect(bench.ok || bench.error.reason).toBe('invalid-json');
    const split = await loadQuestionSet(await write({ ...base, source: { kind: 'train-split', description: 'x', split: 'test' } }));
    expect(split.ok || split.error.reason).toBe('invalid-json');
    const ok = await loadQuestionSet(await write({ ...base, role: 'evaluation', source: { kind: 'benchmark', description: 'GPQA' } }));
    expect(ok.ok).toBe(true);
  });
  it('refuses a question of the wrong kind for the benchmark (schema)', async () => {
    const r = await loadQuestionSet(await write({ ...base, benchmark: 'math-500' }));
    expect(r.ok || r.error.reason).toBe('invalid-json');
  });
  it('refuses an answer letter beyond the options and duplicate ids', async () => {
    const p = await write({ ...base, questions: [{ ...base.questions[0], answer: 'E' }] });
    expect(await loadQuestionSet(p)).toEqual({ ok: false, error: { reason: 'eval-question-invalid', path: p, id: 'q1', detail: 'answer E is beyond the 4 options' } });
    const d = await write({ ...base, questions: [base.questions[0], base.questions[0]] });
    expect(await loadQuestionSet(d)).toEqual({ ok: false, error: { reason: 'eval-question-invalid', path: d, id: 'q1', detail: 'duplicate id' } });
  });
  it('refuses functional tests without fnName', async () => {
    const p = await write({ ...base, benchmark: 'livecodebench', questions: [{ id: 'c', kind: 'code', problem: 'p', tests: [{ type: 'functional', args: [1], expected: 1 }] }] });
    expect(await loadQuestionSet(p)).toEqual({ ok: false, error: { reason: 'eval-question-invalid', path: p, id: 'c', detail: 'functional tests need fnName' } });
  });
  it('a missing file is missing-input', async () => {
    expect(await loadQuestionSet('/nonexistent/set.json')).toEqual({ ok: false, error: { reason: 'missing-input', stage: 'eval', path: '/nonexistent/set.json' } });
  });
});
