/**
 * Answer retention: how many of the full-precision model's right answers a ternary model keeps, on an
 * open-answer set of our own (schemas/answer-set.schema.json, data/answers/).
 *
 * Each question is sent as the only user turn to the served chat endpoint with the client's settings
 * (temperature 0; sampling penalties are whatever the submission ships, as a user gets them), scored by
 * answer-score.ts, and tabulated per kind. `retentionTable` puts a float report and a ternary report of
 * the same set side by side: retention = ternary accuracy / float accuracy. Open answers have no chance
 * level (floor 0), so the grader's normalisation with the float model as the ceiling,
 * (ternary - 0) / (float - 0), is the same figure.
 *
 * Answer sets always have the role `evaluation` (the schema allows nothing else): they are only scored.
 * Nothing that fits weights or chooses a default reads them (test/eval-answers.test.ts checks quantize's
 * and fetch-calib's inputs and the Python workers' sources for them).
 */
import type { Failure } from '../../engine/failure.ts';
import type { StageFailure } from '../failures.ts';
import { err, ok, type Result } from '../../engine/result.ts';
import type { AnswerQuestion, AnswerSet } from '../../schemas/generated/answer-set.ts';
import { readSetFile } from './questions.ts';
import { numbersIn, normalise, scoreNumber, scoreWord, type AnswerScore } from './answer-score.ts';
import { completeAll } from './client.ts';
import { answerText } from './content.ts';
import { serving, type ServeOptions } from './serve-model.ts';
import { zeroReason } from './score.ts';
import type { AnswerOutcome, AnswerReport, KindRow } from '../../schemas/generated/answer-report.ts';
import type { RetentionRow } from '../../schemas/generated/answer-retention.ts';
export type { AnswerOutcome, AnswerReport, KindRow, RetentionRow };

export const ANSWER_SCHEMA = 'answer-set.schema.json';
/** One run of the set against one endpoint (AnswerReport); answers.json holds two (EVAL_OUTPUTS, run.ts). */
export const ANSWER_REPORT_SCHEMA = 'answer-report.schema.json';
/** The answer set every profile's eval stage and bench:quality ask by default (repository-relative). */
export const ANSWER_SET = 'data/answers/everyday.json';
/**
 * The default `max_tokens` of answer requests: the full-precision smol model's right answers end well
 * within it (a reply cut off there scores zero).
 */
export const ANSWER_MAX_TOKENS = 128;

/** A validated answer set and where it came from. */
export interface LoadedAnswerSet {
  /** The file, as given (repository-relative when `root` was given). */
  readonly path: string;
  /** sha256 of the file's bytes: the report names exactly which questions were asked. */
  readonly sha256: string;
  readonly set: AnswerSet;
}

/** Why a question breaks a rule the schema cannot state, or null when it keeps them all. */
function questionRule(set: AnswerSet, q: AnswerQuestion): string | null {
  const kind = set.kinds[q.kind];
  if (kind === undefined) return `kind ${q.kind} is not declared in kinds`;
  const asked = ` ${normalise(q.question)} `;
  if (kind.answer === 'number') {
    if (q.accept.length !== 1 || !/^(0|[1-9]\d*)$/.test(q.accept[0]!)) return `a number answer is exactly one non-negative integer in digits, got ${JSON.stringify(q.accept)}`;
    if (numbersIn(q.question).includes(Number(q.accept[0]))) return `the answer ${q.accept[0]} is a number the question states`;
    return null;
  }
  for (const a of q.accept) {
    if (normalise(a) === '') return `accepted spelling ${JSON.stringify(a)} has no letters or digits`;
    if (asked.includes(` ${normalise(a)} `)) return `accepted spelling ${JSON.stringify(a)} occurs in the question`;
  }
  return null;
}

/** Read and check one answer set file: the schema, then unique ids, declared kinds, answers the question does not give away. */
export async function loadAnswerSet(path: string, root?: string): Promise<Result<LoadedAnswerSet, Failure | StageFailure>> {
  const file = await readSetFile(path, root, ANSWER_SCHEMA);
  if (!file.ok) return file;
  const { shown, sha256, value } = file.value;
  const set = value as AnswerSet;
  const seen = new Set<string>();
  for (const q of set.questions) {
    if (seen.has(q.id)) return err({ reason: 'eval-question-invalid', path: shown, id: q.id, detail: 'duplicate id' });
    seen.add(q.id);
    const broken = questionRule(set, q);
    if (broken !== null) return err({ reason: 'eval-question-invalid', path: shown, id: q.id, detail: broken });
  }
  const unused = Object.keys(set.kinds).filter((k) => !set.questions.some((q) => q.kind === k));
  if (unused.length > 0) return err({ reason: 'eval-question-invalid', path: shown, id: '-', detail: `kinds without questions: ${unused.join(', ')}` });
  return ok({ path: shown, sha256, set });
}

/** Every spelling of a word kind: its declared candidates and all its questions' accepted spellings. */
export function kindCandidates(set: AnswerSet, kind: string): string[] {
  const all = [...(set.kinds[kind]?.candidates ?? []), ...set.questions.filter((q) => q.kind === kind).flatMap((q) => q.accept)];
  return [...new Set(all)];
}

/** Score one reply to one question of `set`. */
export function scoreAnswer(set: AnswerSet, q: AnswerQuestion, content: string | null): AnswerScore {
  return set.kinds[q.kind]!.answer === 'number' ? scoreNumber(content, q.question, q.accept[0]!) : scoreWord(content, q.question, q.accept, kindCandidates(set, q.kind));
}

const REPLY_KEPT = 300;
/** The row over every question. */
export const ALL_KINDS = 'all';

function kindRow(kind: string, outcomes: readonly AnswerOutcome[]): KindRow {
  const correct = outcomes.filter((o) => o.correct).length;
  return { kind, questions: outcomes.length, correct, accuracy: outcomes.length === 0 ? 0 : correct / outcomes.length, truncations: outcomes.filter((o) => o.zeroReason === 'truncated').length };
}

export interface RunAnswersOptions {
  /** Server root, e.g. `http://127.0.0.1:8000`. */
  baseUrl: string;
  set: LoadedAnswerSet;
  /** Requests in flight. Default 16. */
  concurrency?: number;
  /** `max_tokens` of every request. */
  maxTokens: number;
  /** Per-request deadline in ms. Default 300000. */
  timeoutMs?: number;
  model?: string;
  signal?: AbortSignal;
}

/** Ask every question of the set, score and tabulate per kind. */
export async function runAnswers(opts: RunAnswersOptions): Promise<AnswerReport> {
  const started = performance.now();
  const { set } = opts.set;
  const { settings, completions } = await completeAll(
    set.questions.map((q) => ({ id: q.id, messages: [{ role: 'user' as const, content: q.question }] })),
    { baseUrl: opts.baseUrl, concurrency: opts.concurrency, maxTokens: opts.maxTokens, timeoutMs: opts.timeoutMs, model: opts.model, temperature: 0, signal: opts.signal },
  );
  const outcomes = set.questions.map((q, i): AnswerOutcome => {
    const c = completions[i]!;
    const zero = zeroReason(c);
    const s = scoreAnswer(set, q, c.content);
    return {
      id: q.id,
      kind: q.kind,
      correct: zero === null && s.correct,
      extracted: s.extracted,
      others: s.others,
      zeroReason: zero,
      finishReason: c.finishReason,
      completionTokens: c.usage?.completionTokens ?? null,
      latencyMs: c.latencyMs,
      reply: c.error ?? answerText(c.content).slice(0, REPLY_KEPT),
    };
  });
  const kinds = Object.keys(set.kinds);
  return {
    version: 1,
    set: { name: set.name, path: opts.set.path, sha256: opts.set.sha256, role: set.role, questions: set.questions.length },
    settings,
    wallMs: performance.now() - started,
    rows: [...kinds.map((k) => kindRow(k, outcomes.filter((o) => o.kind === k))), kindRow(ALL_KINDS, outcomes)],
    outcomes,
  };
}

/** Serve `serve.dir` (serve-model.ts), ask the answer set, stop the server. */
export async function askServed(serve: ServeOptions, opts: Omit<RunAnswersOptions, 'baseUrl' | 'signal'>): Promise<Result<AnswerReport, Failure | StageFailure>> {
  return serving(serve, async (baseUrl) => ok(await runAnswers({ ...opts, baseUrl, signal: serve.signal })));
}

/** Float and ternary reports of the same set (same file, by sha256) side by side, per kind and overall. */
export function retentionTable(float: AnswerReport, ternary: AnswerReport): RetentionRow[] {
  if (float.set.sha256 !== ternary.set.sha256) throw new Error(`retention compares one answer set: ${float.set.path} (${float.set.sha256}) vs ${ternary.set.path} (${ternary.set.sha256})`);
  const right = (r: AnswerReport): Set<string> => new Set(r.outcomes.filter((o) => o.correct).map((o) => o.id));
  const fr = right(float);
  const tr = right(ternary);
  return float.rows.map((f) => {
    const t = ternary.rows.find((r) => r.kind === f.kind)!;
    const ids = float.outcomes.filter((o) => f.kind === ALL_KINDS || o.kind === f.kind).map((o) => o.id);
    return {
      kind: f.kind,
      questions: f.questions,
      floatCorrect: f.correct,
      ternaryCorrect: t.correct,
      bothCorrect: ids.filter((id) => fr.has(id) && tr.has(id)).length,
      floatAccuracy: f.accuracy,
      ternaryAccuracy: t.accuracy,
      retention: f.correct === 0 ? null : t.accuracy / f.accuracy,
    };
  });
}

/** The retention table as Markdown. */
export function formatRetention(rows: readonly RetentionRow[]): string {
  const head = '| kind | n | float right | ternary right | both right | float acc. | ternary acc. | retention |';
  const rule = '|---|---:|---:|---:|---:|---:|---:|---:|';
  const lines = rows.map(
    (r) =>
      `| ${r.kind} | ${r.questions} | ${r.floatCorrect} | ${r.ternaryCorrect} | ${r.bothCorrect} | ${r.floatAccuracy.toFixed(3)} | ${r.ternaryAccuracy.toFixed(3)} | ${r.retention === null ? '-' : r.retention.toFixed(3)} |`,
  );
  return [head, rule, ...lines].join('\n');
}
