/**
 * Question sets as the benchmarks' own dataset rows, so that lm-eval's tasks (python/ternforge/harness.py) read
 * project-written items exactly as they read the real splits: the same columns, the same split names, one
 * JSON-lines file per benchmark and split. On the GPU box the real splits are the files; here and in CI the
 * project-written sets are, converted by `writeBenchmarkData`. `questionIdOf` reads an item's id back out of
 * the document lm-eval logged with each sample.
 *
 * Rows, per benchmark (the Hugging Face datasets the grader's benchmarks are published as):
 * - gpqa-diamond (`Idavidrein/gpqa`, config gpqa_diamond, split train): `Question`, `Correct Answer`,
 *   `Incorrect Answer 1..3`, `Record ID`; lm-eval shuffles the four choices itself.
 * - math-500 (`HuggingFaceH4/MATH-500`, test): `problem`, `solution` (the answer boxed), `answer`,
 *   `subject`, `level`, `unique_id`.
 * - mmlu-pro (`TIGER-Lab/MMLU-Pro`, test): `question_id`, `question`, `options`, `answer` (a letter),
 *   `answer_index`, `cot_content`, `category`, `src`.
 * - livecodebench (`livecodebench/code_generation_lite`, test): `question_id`, `question_title`,
 *   `question_content`, `platform`, `contest_id`, `contest_date`, `starter_code`, `difficulty`,
 *   `public_test_cases` (JSON: input, output, testtype), `private_test_cases`, `metadata` (JSON: func_name).
 */
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ChoiceQuestion, CodeQuestion, MathQuestion } from '../../schemas/generated/eval-question.ts';
import type { EvalData } from '../../schemas/generated/eval-data.ts';
import type { SetSummary } from '../../schemas/generated/eval-report.ts';
import { engineSchemaSet } from '../../engine/json-io.ts';
import { err, ok, type Result } from '../../engine/result.ts';
import type { EvalFailure, RecordsFailure } from '../failures.ts';
import type { LoadedSet } from './questions.ts';
import type { Benchmark } from './score.ts';

/** What the harness worker reads for one benchmark: its rows' files by split, in a format `datasets` loads. */
export interface BenchmarkData {
  benchmark: Benchmark;
  format: 'json' | 'parquet' | 'csv';
  files: Record<string, string[]>;
}

/** The split each benchmark's lm-eval task evaluates (GPQA is published as one `train` split). */
export const EVAL_SPLIT: Readonly<Record<Benchmark, string>> = { 'gpqa-diamond': 'train', 'math-500': 'test', livecodebench: 'test', 'mmlu-pro': 'test' };

/**
 * The published size of each benchmark's graded split (GPQA Diamond, MATH-500, LiveCodeBench release_v6's new
 * problems, MMLU-Pro's test split): what the preflight plans the eval with before the splits are fetched.
 */
export const BENCHMARK_ITEMS: Readonly<Record<Benchmark, number>> = { 'gpqa-diamond': 198, 'math-500': 500, livecodebench: 175, 'mmlu-pro': 12_032 };

/** The column that holds an item's id in each benchmark's rows. */
const ID_COLUMN: Readonly<Record<Benchmark, string>> = { 'gpqa-diamond': 'Record ID', 'math-500': 'unique_id', livecodebench: 'question_id', 'mmlu-pro': 'question_id' };

const letterIndex = (answer: string): number => answer.charCodeAt(0) - 65;

type Row = Result<Record<string, unknown>, string>;

function gpqaRow(q: ChoiceQuestion): Row {
  if (q.options.length !== 4) return err(`gpqa-diamond item ${q.id}: ${q.options.length} options, GPQA has 4`);
  const correct = letterIndex(q.answer);
  const incorrect = q.options.filter((_, i) => i !== correct);
  return ok({ Question: q.question, 'Correct Answer': q.options[correct], 'Incorrect Answer 1': incorrect[0], 'Incorrect Answer 2': incorrect[1], 'Incorrect Answer 3': incorrect[2], 'Record ID': q.id });
}

function mmluProRow(q: ChoiceQuestion, set: string): Row {
  if (q.category === undefined) return err(`mmlu-pro item ${q.id} of ${set} has no category: lm-eval's mmlu_pro tasks are per category`);
  return ok({ question_id: q.id, question: q.question, options: q.options, answer: q.answer, answer_index: letterIndex(q.answer), cot_content: '', category: q.category, src: set });
}

function mathRow(q: MathQuestion): Record<string, unknown> {
  return { problem: q.problem, solution: `The answer is $\\boxed{${q.answer}}$.`, answer: q.answer, subject: 'project-written', level: 0, unique_id: q.id };
}

function codeRow(q: CodeQuestion): Record<string, unknown> {
  const cases = q.tests.map((t) =>
    t.type === 'stdin'
      ? { input: t.input, output: t.output, testtype: 'stdin' }
      : { input: t.args.map((a) => JSON.stringify(a)).join('\n'), output: JSON.stringify(t.expected), testtype: 'functional' },
  );
  return {
    question_id: q.id,
    question_title: q.id,
    question_content: q.problem,
    platform: 'project-written',
    contest_id: '',
    contest_date: '',
    starter_code: q.starterCode ?? '',
    difficulty: '',
    public_test_cases: JSON.stringify(cases),
    private_test_cases: '',
    metadata: JSON.stringify(q.fnName === undefined ? {} : { func_name: q.fnName }),
  };
}

function rowOf(set: LoadedSet, q: LoadedSet['set']['questions'][number]): Row {
  const b = set.set.benchmark;
  if (b === 'gpqa-diamond' && q.kind === 'choice') return gpqaRow(q);
  if (b === 'mmlu-pro' && q.kind === 'choice') return mmluProRow(q, set.set.name);
  if (b === 'math-500' && q.kind === 'math') return ok(mathRow(q));
  if (b === 'livecodebench' && q.kind === 'code') return ok(codeRow(q));
  return err(`a ${q.kind} item in a ${b} set`);
}

/** What `writeBenchmarkData` wrote: the worker's input, and which set each `<benchmark>/<id>` came from. */
export interface WrittenData {
  data: BenchmarkData[];
  origin: Map<string, string>;
}

/**
 * Write every set's items as their benchmark's rows under `dir` (one file per benchmark). Refuses, before
 * writing anything, two items of one benchmark with the same id (samples are joined back to their items by it)
 * and an item its benchmark's rows cannot hold.
 */
export function writeBenchmarkData(sets: readonly LoadedSet[], dir: string): Result<WrittenData, EvalFailure> {
  const byBenchmark = new Map<Benchmark, Record<string, unknown>[]>();
  const origin = new Map<string, string>();
  for (const set of sets) {
    const rows = byBenchmark.get(set.set.benchmark) ?? [];
    for (const q of set.set.questions) {
      const key = `${set.set.benchmark}/${q.id}`;
      const refused = (detail: string) => err({ reason: 'eval-question-invalid' as const, path: set.path, id: q.id, detail });
      if (origin.has(key)) return refused(`item ${q.id} has the id of an item of ${origin.get(key)}; the ${set.set.benchmark} sets' ids must differ`);
      origin.set(key, set.set.name);
      const row = rowOf(set, q);
      if (!row.ok) return refused(row.error);
      rows.push(row.value);
    }
    byBenchmark.set(set.set.benchmark, rows);
  }
  mkdirSync(dir, { recursive: true });
  const data = [...byBenchmark].map(([benchmark, rows]) => {
    const file = join(dir, `${benchmark}.${EVAL_SPLIT[benchmark]}.jsonl`);
    writeFileSync(file, rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
    return { benchmark, format: 'json' as const, files: { [EVAL_SPLIT[benchmark]]: [file] } };
  });
  return ok({ data, origin });
}

/** A set as the eval report names it. */
export function setSummary(s: LoadedSet): SetSummary {
  return { name: s.set.name, path: s.path, sha256: s.sha256, role: s.set.role, benchmark: s.set.benchmark, source: s.set.source, questions: s.set.questions.length };
}

/** An item's id, from the document lm-eval logged with its sample. */
export function questionIdOf(benchmark: Benchmark, doc: Record<string, unknown>): string {
  const id = doc[ID_COLUMN[benchmark]];
  if (typeof id !== 'string' && typeof id !== 'number') throw new Error(`${benchmark} sample's document has no ${ID_COLUMN[benchmark]}`);
  return String(id);
}

/** fetch-eval's index (schemas/eval-data.schema.json) in `dir`: the real splits it fetched, or none. */
export function readEvalData(dir: string): Result<EvalData, RecordsFailure> {
  const path = join(dir, 'eval-data.json');
  const refused = (errors: string[]) => err({ reason: 'evidence-record-invalid' as const, stage: 'fetch-eval', path, errors });
  let value: unknown;
  try {
    value = JSON.parse(readFileSync(path, 'utf8'));
  } catch (e) {
    return refused([(e as Error).message]);
  }
  const errors = engineSchemaSet().validate('eval-data.schema.json', value);
  return errors.length > 0 ? refused(errors) : ok(value as EvalData);
}

/**
 * The real splits as the worker's input and as the report names them, one entry per source: its files by split
 * (absolute), and a set summary whose sha256 is over the files' own sha256s in split order.
 */
export function realData(index: EvalData, dir: string): { data: BenchmarkData[]; sets: SetSummary[] } {
  const data = index.sources.map((s) => ({ benchmark: s.benchmark, format: s.format, files: Object.fromEntries(Object.entries(s.splits).map(([split, files]) => [split, files.map((f) => join(dir, f.path))])) }));
  const sets = index.sources.map((s) => ({
    name: s.name,
    path: `${s.dataset}@${s.commit}`,
    sha256: createHash('sha256').update(Object.values(s.splits).flat().map((f) => f.sha256).join('\n')).digest('hex'),
    role: s.role,
    benchmark: s.benchmark,
    source: { kind: 'benchmark' as const, description: `${s.benchmark}: the benchmark's own items, fetched by fetch-eval at a locked commit`, dataset: s.dataset, split: Object.keys(s.splits).join(','), revision: s.commit },
    questions: 0,
  }));
  return { data, sets };
}
