/**
 * Answer retention (lib/eval/answer-score.ts, lib/eval/answers.ts, data/answers/): the scorer on its edge
 * cases, the project's answer set and the rules its loader enforces, the evaluation role kept away from
 * everything that fits weights, and the eval stage's retention figure on the shared tiny build.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { numbersIn, scoreNumber, scoreWord } from '../lib/eval/answer-score.ts';
import { ALL_KINDS, kindCandidates, loadAnswerSet, retentionTable, type AnswerReport, type RetentionRow } from '../lib/eval/answers.ts';
import { loadQuestionSet } from '../lib/eval/questions.ts';
import { stage as fetchCalib } from '../stages/fetch-calib.ts';
import { stage as quantize } from '../stages/quantize.ts';

const root = join(import.meta.dirname, '..');
const SET = 'data/answers/everyday.json';

describe('scoreWord', () => {
  const capitals = ['Paris', 'Lyon', 'Tokyo', 'New Delhi', 'Delhi', 'Canberra', 'Sydney'];
  const score = (reply: string, accept = ['Paris'], question = 'What is the capital of France?'): ReturnType<typeof scoreWord> => scoreWord(reply, question, accept, capitals);

  it('finds the answer among extra words, in any case, with punctuation and accents', () => {
    expect(score('The capital of France is Paris.').correct).toBe(true);
    expect(score('PARIS!').correct).toBe(true);
    expect(score('**Paris** (the City of Light), of course').correct).toBe(true);
    expect(scoreWord('It is Brasília.', 'What is the capital of Brazil?', ['Brasília', 'Brasilia'], ['Brasília', 'Brasilia']).extracted).toBe('Brasília');
    expect(scoreWord('It is brasilia', 'What is the capital of Brazil?', ['Brasília'], ['Brasília']).correct).toBe(true);
  });

  it('matches whole words only', () => {
    expect(score('Parisian cafés are famous.').correct).toBe(false);
    expect(scoreWord('The opposite of hot is coldness.', 'What is the opposite of hot?', ['cold'], ['cold', 'hot']).correct).toBe(false);
  });

  it('takes any accepted spelling, the longest first', () => {
    const delhi = (reply: string): ReturnType<typeof scoreWord> => scoreWord(reply, 'What is the capital of India?', ['New Delhi', 'Delhi'], capitals);
    expect(delhi('The capital of India is New Delhi.')).toEqual({ correct: true, extracted: 'New Delhi', others: [] });
    expect(delhi('Delhi.').correct).toBe(true);
  });

  it('never credits a reply that lists several candidates', () => {
    expect(score('Paris or Lyon')).toEqual({ correct: false, extracted: 'Paris', others: ['Lyon'] });
    expect(scoreWord('Sydney, or maybe Canberra.', 'What is the capital of Australia?', ['Canberra'], capitals)).toEqual({ correct: false, extracted: 'Canberra', others: ['Sydney'] });
    expect(score('Lyon').correct).toBe(false);
  });

  it('ignores candidates the question itself names', () => {
    const opposites = ['cold', 'hot', 'up', 'down'];
    expect(scoreWord('The opposite of hot is cold.', 'What is the opposite of hot?', ['cold'], opposites).correct).toBe(true);
    expect(scoreWord('The opposite of hot is cold, and up is down.', 'What is the opposite of hot?', ['cold'], opposites).correct).toBe(false);
  });

  it('reads the answer, not the reasoning, and nothing from an empty reply', () => {
    expect(score('<think>Lyon? no</think>Paris').correct).toBe(true);
    expect(score('').correct).toBe(false);
    expect(scoreWord(null, 'q', ['Paris'], capitals)).toEqual({ correct: false, extracted: null, others: [] });
  });
});

describe('scoreNumber', () => {
  it('answers with the number the question did not give: "7 minus 5 is 2." answers 2, not 7', () => {
    expect(scoreNumber('7 minus 5 is 2.', 'What is 7 minus 5?', '2')).toEqual({ correct: true, extracted: '2', others: [] });
    expect(scoreNumber('7 minus 5 is 2.', 'What is 7 minus 5?', '7').correct).toBe(false);
    expect(scoreNumber('7 + 5 = 12', 'What is 7 plus 5?', '12').correct).toBe(true);
    expect(scoreNumber('The answer is 7.', 'What is 7 minus 5?', '2')).toEqual({ correct: false, extracted: null, others: [] });
  });

  it('reads number words and digits with separators', () => {
    expect(scoreNumber('A spider has eight legs.', 'How many legs does a spider have?', '8').correct).toBe(true);
    expect(scoreNumber('There are twenty-four hours in a day.', 'How many hours are in a day?', '24').correct).toBe(true);
    expect(scoreNumber('A century is one hundred years.', 'How many years are in a century?', '100').correct).toBe(true);
    expect(scoreNumber('1,000 metres.', 'How many metres are in a kilometre?', '1000').correct).toBe(true);
    expect(numbersIn('three hundred and sixty-six days, 2.5 or 12')).toEqual([366, 2.5, 12]);
    expect(numbersIn('7-5=2')).toEqual([7, 5, 2]);
  });

  it('never credits several numbers, even when the right one is last', () => {
    expect(scoreNumber('It is 11 or 12.', 'What is 7 plus 5?', '12')).toEqual({ correct: false, extracted: null, others: ['11', '12'] });
    expect(scoreNumber('12, no wait, 13', 'What is 7 plus 5?', '13').correct).toBe(false);
    expect(scoreNumber('The answer is 12. 12 is right.', 'What is 7 plus 5?', '12').correct).toBe(true);
  });

  it('compares by value', () => {
    expect(scoreNumber('12.0', 'What is 7 plus 5?', '12').correct).toBe(true);
    expect(scoreNumber('12.5', 'What is 7 plus 5?', '12').correct).toBe(false);
  });
});

async function variant(edit: (set: Record<string, unknown> & { questions: Array<Record<string, unknown>> }) => void): Promise<string> {
  const set = JSON.parse(readFileSync(join(root, SET), 'utf8'));
  delete set.$schema;
  edit(set);
  const path = join(await mkdtemp(join(tmpdir(), 'answers-')), 'set.json');
  await writeFile(path, JSON.stringify(set));
  return path;
}

describe('the answer set', () => {
  it(`${SET}: role evaluation, project-written, at least 100 questions of several kinds, every question answerable`, async () => {
    const r = await loadAnswerSet(join(root, SET), root);
    if (!r.ok) throw new Error(JSON.stringify(r.error));
    const { set } = r.value;
    expect(set.role).toBe('evaluation');
    expect(set.source.kind).toBe('project-written');
    expect(set.questions.length).toBeGreaterThanOrEqual(100);
    const kinds = Object.keys(set.kinds);
    expect(kinds.length).toBeGreaterThanOrEqual(4);
    for (const k of kinds) expect(set.questions.filter((q) => q.kind === k).length, k).toBeGreaterThanOrEqual(15);
    expect(new Set(set.questions.map((q) => q.id)).size).toBe(set.questions.length);
    expect(new Set(set.questions.map((q) => q.question)).size).toBe(set.questions.length);
    // Each reference answer, given as a plain reply, scores right: accepted spellings and the scorer agree.
    for (const q of set.questions) {
      const reply = `The answer is ${q.accept[0]!}.`;
      const s = set.kinds[q.kind]!.answer === 'number' ? scoreNumber(reply, q.question, q.accept[0]!) : scoreWord(reply, q.question, q.accept, kindCandidates(set, q.kind));
      expect(s.correct, `${q.id}: ${JSON.stringify(s)}`).toBe(true);
    }
  });

  it('refuses any role but evaluation', async () => {
    for (const role of ['selection', 'calibration']) {
      const r = await loadAnswerSet(await variant((s) => (s.role = role)));
      expect(r.ok).toBe(false);
      if (!r.ok) expect(r.error).toMatchObject({ reason: 'invalid-json', errors: [expect.stringMatching(/^\/role must be equal to constant/)] });
    }
  });

  it('is not a question set the sweep could take', async () => {
    const r = await loadQuestionSet(join(root, SET), root);
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error.reason).toBe('invalid-json');
  });

  it('refuses duplicate ids, undeclared kinds, empty spellings, answers the question gives away, and bad number answers', async () => {
    const cases: Array<[(s: Record<string, unknown> & { questions: Array<Record<string, unknown>> }) => void, string]> = [
      [(s) => (s.questions[1]!.id = s.questions[0]!.id), 'duplicate id'],
      [(s) => (s.questions[0]!.kind = 'weather'), 'kind weather is not declared in kinds'],
      [(s) => (s.questions[0]!.accept = ['?!']), 'accepted spelling "?!" has no letters or digits'],
      [(s) => (s.questions[0]!.accept = ['France']), 'accepted spelling "France" occurs in the question'],
      [(s) => (s.questions.find((q) => q.kind === 'count')!.accept = ['5', '6']), 'a number answer is exactly one non-negative integer in digits, got ["5","6"]'],
      [(s) => (s.questions.find((q) => q.kind === 'count')!.accept = ['2.5']), 'a number answer is exactly one non-negative integer in digits, got ["2.5"]'],
      [(s) => (s.questions.find((q) => q.id === 'count-legs-spider')!.question = 'Does a spider have 8 legs?'), 'the answer 8 is a number the question states'],
    ];
    for (const [edit, detail] of cases) {
      const r = await loadAnswerSet(await variant(edit));
      expect(r.ok, detail).toBe(false);
      if (!r.ok) expect(r.error).toMatchObject({ reason: 'eval-question-invalid', detail });
    }
    const empty = await loadAnswerSet(await variant((s) => (s.questions[0]!.accept = [])));
    expect(empty.ok).toBe(false);
    if (!empty.ok) expect(empty.error).toMatchObject({ reason: 'invalid-json', errors: [expect.stringMatching(/^\/questions\/0\/accept must NOT have fewer than 1 items/)] });
  });
});

/** Every file under `dir` (recursively) whose name ends with one of `exts`. */
function filesUnder(dir: string, exts: readonly string[]): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) {
      if (name !== '__pycache__') out.push(...filesUnder(p, exts));
    } else if (exts.some((e) => name.endsWith(e))) out.push(p);
  }
  return out;
}

describe('nothing that fits weights takes the answer set', () => {
  it("quantize's and fetch-calib's declared inputs hold no answer set, for every profile", () => {
    for (const profile of ['tiny', 'smol', 'qwen3.5-4b']) {
      const stages = (JSON.parse(readFileSync(join(root, 'profiles', `${profile}.json`), 'utf8')) as { stages: Record<string, unknown> }).stages;
      for (const s of [quantize, fetchCalib]) {
        const params = stages[s.name] as never;
        const inputs = s.inputs === undefined ? [] : s.inputs(params, root);
        const evaluation = inputs.filter((i) => /^data\/(answers|eval)\//.test(i) || (i.endsWith('.json') && (JSON.parse(readFileSync(join(root, i), 'utf8')) as { role?: unknown }).role === 'evaluation'));
        expect(evaluation, `${profile} ${s.name}`).toEqual([]);
      }
    }
  });

  it('no question of the set appears in the Python workers (quantize, calibration, teacher prompts) or in selection data', async () => {
    const r = await loadAnswerSet(join(root, SET), root);
    if (!r.ok) throw new Error(JSON.stringify(r.error));
    const files = [...filesUnder(join(root, 'python', 'ternforge'), ['.py', '.txt', '.json', '.jsonl', '.jinja', '.md']), ...filesUnder(join(root, 'data', 'selection'), ['.json'])];
    expect(files.filter((f) => f.includes('/data/selection/')).length).toBeGreaterThan(0);
    expect(files.length).toBeGreaterThan(10);
    const texts = files.map((f) => [f, readFileSync(f, 'utf8').toLowerCase()] as const);
    for (const q of r.value.set.questions) {
      const needle = q.question.toLowerCase();
      expect(texts.filter(([, t]) => t.includes(needle)).map(([f]) => f), q.question).toEqual([]);
    }
  });
});

function report(sha256: string, outcomes: Array<[string, string, boolean]>): AnswerReport {
  const kinds = [...new Set(outcomes.map(([, k]) => k))];
  const row = (kind: string, os: Array<[string, string, boolean]>): AnswerReport['rows'][number] => ({ kind, questions: os.length, correct: os.filter(([, , c]) => c).length, accuracy: os.filter(([, , c]) => c).length / os.length, truncations: 0 });
  return {
    version: 1,
    set: { name: 's', path: 'p', sha256, role: 'evaluation', questions: outcomes.length },
    settings: { url: 'u', model: 'm', concurrency: 1, maxTokens: 8, temperature: 0, timeoutMs: 1, extraBody: {} },
    wallMs: 0,
    rows: [...kinds.map((k) => row(k, outcomes.filter(([, kk]) => kk === k))), row(ALL_KINDS, outcomes)],
    outcomes: outcomes.map(([id, kind, correct]) => ({ id, kind, correct, extracted: null, others: [], zeroReason: null, finishReason: 'stop', completionTokens: 1, latencyMs: 1, reply: '' })),
  };
}

describe('retentionTable', () => {
  it('per kind and overall: retention = ternary accuracy / float accuracy; none where the float model answered nothing', () => {
    const float = report('x', [['a', 'k1', true], ['b', 'k1', true], ['c', 'k1', false], ['d', 'k2', false]]);
    const ternary = report('x', [['a', 'k1', false], ['b', 'k1', true], ['c', 'k1', true], ['d', 'k2', true]]);
    const rows = retentionTable(float, ternary);
    expect(rows.map((r) => [r.kind, r.floatCorrect, r.ternaryCorrect, r.bothCorrect, r.retention])).toEqual([
      ['k1', 2, 2, 1, 1],
      ['k2', 0, 1, 0, null],
      [ALL_KINDS, 2, 3, 1, 1.5],
    ]);
    expect(() => retentionTable(float, report('y', []))).toThrow(/one answer set/);
  });
});

const workdir = process.env.TERNFORGE_TINY_BUILD;

describe.skipIf(workdir === undefined)('eval on tiny: the retention figure', () => {
  it('answers.json holds both reports and a row per kind; eval.md and the evidence summary carry it', async () => {
    const out = join(workdir!, '.ternforge', 'tiny', 'eval');
    const answers = JSON.parse(readFileSync(join(out, 'outputs', 'answers.json'), 'utf8')) as { retention: RetentionRow[]; float: AnswerReport; ternary: AnswerReport };
    const set = await loadAnswerSet(join(root, SET), root);
    if (!set.ok) throw new Error(JSON.stringify(set.error));
    const kinds = [...Object.keys(set.value.set.kinds), ALL_KINDS];
    expect(answers.retention.map((r) => r.kind)).toEqual(kinds);
    for (const r of [answers.float, answers.ternary]) {
      expect(r.set).toEqual({ name: set.value.set.name, path: SET, sha256: set.value.sha256, role: 'evaluation', questions: set.value.set.questions.length });
      expect(r.outcomes.length).toBe(set.value.set.questions.length);
      expect(r.settings.maxTokens).toBe(32);
      // Every request came back (a random model runs to max_tokens: truncated, never failed).
      expect(r.outcomes.every((o) => o.zeroReason === null || o.zeroReason === 'truncated')).toBe(true);
    }
    const all = answers.retention.at(-1)!;
    expect(all.questions).toBe(set.value.set.questions.length);
    const md = readFileSync(join(out, 'outputs', 'eval.md'), 'utf8');
    expect(md).toContain('## Answer retention');
    expect(md).toContain('| kind | n | float right | ternary right | both right | float acc. | ternary acc. | retention |');
    for (const k of kinds) expect(md).toMatch(new RegExp(`^\\| ${k} \\| `, 'm'));
    const evidence = JSON.parse(readFileSync(join(out, 'evidence.json'), 'utf8')) as { summary: Record<string, unknown> };
    expect(evidence.summary).toMatchObject({ answerAccuracy: { float: all.floatAccuracy, ternary: all.ternaryAccuracy }, answerRetention: all.retention });
  });
});

describe('bench/answers.ts sampling flags', () => {
  it("serves with the profile's penalties, or another frequency penalty when asked; refuses a penalty that is not a number", async () => {
    const { samplingArgs } = await import('../bench/answers.ts');
    const smol = (JSON.parse(readFileSync(join(root, 'profiles', 'smol.json'), 'utf8')) as { stages: { emit: { sampling_defaults: { presence_penalty: number; frequency_penalty: number } } } }).stages.emit.sampling_defaults;
    expect(samplingArgs('smol')).toEqual(['--presence-penalty', String(smol.presence_penalty), '--frequency-penalty', String(smol.frequency_penalty)]);
    expect(samplingArgs('smol', 0)).toEqual(['--presence-penalty', String(smol.presence_penalty), '--frequency-penalty', '0']);
    const { spawnSync } = await import('node:child_process');
    const res = spawnSync(join(root, 'node_modules', '.bin', 'tsx'), [join(root, 'bench', 'answers.ts'), '--frequency-penalty', 'none', 'x'], { encoding: 'utf8' });
    expect(res.status).toBe(2);
    expect(res.stderr).toContain('--frequency-penalty takes a number, not none');
  });
});

describe('bench/answers.ts --float-from', () => {
  it('takes the float report of every committed answers result, and refuses a file that is not JSON, has no float report, or one off its schema', async () => {
    const { readFloatFrom, FLOAT } = await import('../bench/answers.ts');
    const results = join(root, 'bench', 'results');
    const files = readdirSync(results).filter((f) => /^answers.*\.json$/.test(f));
    expect(files.length).toBeGreaterThan(10);
    for (const f of files) {
      const r = readFloatFrom(join(results, f));
      expect(typeof r === 'string' ? `${f}: ${r}` : r.report.version).toBe(1);
    }
    const dir = await mkdtemp(join(tmpdir(), 'ternforge-float-from-'));
    const earlier = JSON.parse(readFileSync(join(results, 'answers-smol.json'), 'utf8')) as { serverArgs: string[]; reports: Record<string, { rows: Array<{ correct: unknown }> }> };
    const write = async (name: string, text: string): Promise<string> => {
      await writeFile(join(dir, name), text);
      return join(dir, name);
    };
    expect(readFloatFrom(await write('cut.json', '{"serverArgs": ['))).toMatch(/JSON/);
    expect(readFloatFrom(await write('list.json', '[]'))).toBe('not an output of bench/answers.ts (no serverArgs list)');
    expect(readFloatFrom(await write('nofloat.json', JSON.stringify({ serverArgs: [], reports: { ternary: earlier.reports[FLOAT] } })))).toBe(`holds no report named ${FLOAT}`);
    earlier.reports[FLOAT]!.rows[0]!.correct = -1;
    expect(readFloatFrom(await write('bad.json', JSON.stringify(earlier)))).toBe(`its ${FLOAT} report fails schemas/answer-report.schema.json: /rows/0/correct must be >= 0`);
  });
});
