/**
 * `npx tsx bench/answers.ts [--profile smol] [--model-dir DIR] [--max-tokens N] [--frequency-penalty X] [--out FILE] MODEL...`:
 * answer retention of any ternary models against the full-precision model, through the served endpoint.
 *
 * Each MODEL is a submission directory (emit's output, `dist/<profile>`), a pack output
 * (`quantization_manifest.json` + `weights/`) or a quantize interchange (`index.json`; packed here first
 * with lib/pack/cli.ts). The full-precision reference is fetch-model's checkpoint (`--model-dir`, default
 * `.ternforge/<profile>/fetch-model/outputs/model`). Every model is served by the repository's server
 * (python/ternforge_server) with the profile's `emit.sampling_defaults`, as its submission would be, and
 * asked the answer set (lib/eval/answers.ts); prints the per-kind table of each against the float model and
 * writes the reports as JSON (`--out`, default bench/results/answers.json). `--float-from FILE` takes the
 * full-precision report from such a JSON of an earlier run instead of serving the reference again.
 * `--frequency-penalty X` serves every model with X in place of the profile's (does it still answer, and
 * stop, without the penalty?).
 *
 * bench:quality uses `answerReports` for its answer rows.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { engineSchemaSet } from '../engine/json-io.ts';
import { ANSWER_MAX_TOKENS, ANSWER_REPORT_SCHEMA, ANSWER_SET, askServed, formatRetention, loadAnswerSet, retentionTable, type AnswerReport, type RetentionRow } from '../lib/eval/answers.ts';
import { writeFloatReference, writePackedServable, type ServeOptions } from '../lib/eval/serve-model.ts';
import { submissionNames } from '../lib/submission/layout.ts';

const { MANIFEST } = submissionNames();
import type { EmitParams } from '../schemas/generated/emit.ts';

const root = join(import.meta.dirname, '..');
const python = join(root, '.ternforge', 'venv', 'bin', 'python');
const tsx = join(root, 'node_modules', '.bin', 'tsx');

/** The name under which the full-precision reference is reported. */
export const FLOAT = 'float';

/** Server flags for a profile's `emit.sampling_defaults` (what its submission ships); `frequencyPenalty` in place of its own. */
export function samplingArgs(profile: string, frequencyPenalty?: number): string[] {
  const emit = (JSON.parse(readFileSync(join(root, 'profiles', `${profile}.json`), 'utf8')) as { stages: { emit: EmitParams } }).stages.emit;
  const d = emit.sampling_defaults;
  const presence = d?.presence_penalty ?? 0;
  const frequency = frequencyPenalty ?? d?.frequency_penalty;
  return frequency === undefined ? [] : ['--presence-penalty', String(presence), '--frequency-penalty', String(frequency)];
}

/** A directory the server loads for `model` (see the module comment), made under `work` when needed. */
function servable(model: string, modelDir: string, work: string): string {
  if (existsSync(join(model, MANIFEST)) && existsSync(join(model, 'config.json'))) return model;
  let packed = model;
  if (existsSync(join(model, 'index.json')) && !existsSync(join(model, MANIFEST))) {
    packed = join(work, 'packed');
    const res = spawnSync(tsx, [join(root, 'lib', 'pack', 'cli.ts'), model, packed], { cwd: root, encoding: 'utf8', stdio: ['ignore', 'ignore', 'pipe'] });
    if (res.status !== 0) throw new Error(`pack ${model} failed (exit ${String(res.status)}):\n${res.stderr.slice(-2000)}`);
  }
  const dir = writePackedServable(packed, modelDir, null, join(work, 'served'));
  if (!dir.ok) throw new Error(dir.error);
  return dir.value;
}

export interface AnswerRun {
  /** Reports by name: FLOAT and every model. */
  readonly reports: Record<string, AnswerReport>;
  /** Each model against FLOAT. */
  readonly retention: Record<string, RetentionRow[]>;
  /** Seconds each model took (serve, ask, stop). */
  readonly seconds: Record<string, number>;
}

/**
 * Serve and ask the full-precision reference and every model in `models` (name -> directory). With
 * `floatReport`, the reference's report of an earlier run is taken instead of asking again (greedy decoding
 * is deterministic: the same set, settings and server flags give the same replies); it must be of the same
 * set file (sha256), `max_tokens` and server flags.
 */
export async function answerReports(opts: { profile: string; modelDir: string; models: Record<string, string>; work: string; maxTokens?: number; frequencyPenalty?: number; floatReport?: { report: AnswerReport; serverArgs: string[] } }): Promise<AnswerRun> {
  const set = await loadAnswerSet(join(root, ANSWER_SET), root);
  if (!set.ok) throw new Error(`answer set: ${JSON.stringify(set.error)}`);
  const args = samplingArgs(opts.profile, opts.frequencyPenalty);
  const reports: Record<string, AnswerReport> = {};
  const seconds: Record<string, number> = {};
  const ask = async (name: string, dir: string): Promise<void> => {
    const t0 = Date.now();
    process.stderr.write(`answers: ${name} (${dir})\n`);
    const serve: ServeOptions = { python, serverPath: join(root, 'python'), dir, scratch: join(opts.work, name, 'scratch'), startupLimitMs: 600_000, signal: new AbortController().signal, args };
    const r = await askServed(serve, { set: set.value, maxTokens: opts.maxTokens ?? ANSWER_MAX_TOKENS });
    if (!r.ok) throw new Error(`answers ${name}: ${JSON.stringify(r.error)}`);
    reports[name] = r.value;
    seconds[name] = (Date.now() - t0) / 1000;
  };
  // Each model's directory is made afresh: nothing of an earlier run (another model under the same name) is served.
  const fresh = (name: string): string => {
    rmSync(join(opts.work, name), { recursive: true, force: true });
    return join(opts.work, name);
  };
  if (opts.floatReport !== undefined) {
    const { report, serverArgs } = opts.floatReport;
    const same = report.set.sha256 === set.value.sha256 && report.settings.maxTokens === (opts.maxTokens ?? ANSWER_MAX_TOKENS) && JSON.stringify(serverArgs) === JSON.stringify(args);
    if (!same) throw new Error(`--float-from: that float report is of another set, max_tokens or server flags (${report.set.sha256}, ${report.settings.maxTokens}, ${JSON.stringify(serverArgs)})`);
    reports[FLOAT] = report;
    seconds[FLOAT] = 0;
  } else {
    const reference = await writeFloatReference(opts.modelDir, null, join(fresh(FLOAT), 'served'));
    if (!reference.ok) throw new Error(reference.error);
    await ask(FLOAT, reference.value);
  }
  for (const [name, model] of Object.entries(opts.models)) await ask(name, servable(model, opts.modelDir, fresh(name)));
  const retention = Object.fromEntries(Object.keys(opts.models).map((n) => [n, retentionTable(reports[FLOAT]!, reports[n]!)]));
  return { reports, retention, seconds };
}

/** Per kind: accuracy of every model side by side, then its retention. */
export function formatSideBySide(run: AnswerRun): string {
  const names = Object.keys(run.reports);
  const models = names.filter((n) => n !== FLOAT);
  const floatRows = run.reports[FLOAT]!.rows;
  const head = `| kind | n | ${names.map((n) => `${n} acc.`).join(' | ')} | ${models.map((n) => `${n} ret.`).join(' | ')} |`;
  const rule = `|---|---:|${names.map(() => '---:').join('|')}|${models.map(() => '---:').join('|')}|`;
  const lines = floatRows.map((f, i) => {
    const acc = names.map((n) => run.reports[n]!.rows[i]!.accuracy.toFixed(3));
    const ret = models.map((n) => {
      const r = run.retention[n]![i]!.retention;
      return r === null ? '-' : r.toFixed(3);
    });
    return `| ${f.kind} | ${f.questions} | ${acc.join(' | ')} | ${ret.join(' | ')} |`;
  });
  return [head, rule, ...lines].join('\n');
}

async function main(argv: string[]): Promise<number> {
  let profile = 'smol';
  let modelDir: string | undefined;
  let maxTokens: number | undefined;
  let out = join(root, 'bench', 'results', 'answers.json');
  let floatFrom: string | undefined;
  let frequencyPenalty: number | undefined;
  const models: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--profile') profile = argv[++i]!;
    else if (a === '--model-dir') modelDir = resolve(argv[++i]!);
    else if (a === '--max-tokens') maxTokens = Number(argv[++i]);
    else if (a === '--out') out = resolve(argv[++i]!);
    else if (a === '--float-from') floatFrom = resolve(argv[++i]!);
    else if (a === '--frequency-penalty') {
      frequencyPenalty = Number(argv[++i]);
      if (!Number.isFinite(frequencyPenalty)) {
        process.stderr.write(`bench/answers: --frequency-penalty takes a number, not ${String(argv[i])}\n`);
        return 2;
      }
    } else if (a.startsWith('-')) {
      process.stderr.write(`bench/answers: unknown option ${a}\nusage: npx tsx bench/answers.ts [--profile smol] [--model-dir DIR] [--max-tokens N] [--frequency-penalty X] [--out FILE] [--float-from FILE] MODEL...\n`);
      return 2;
    } else models.push(resolve(a));
  }
  if (models.length === 0) {
    process.stderr.write('bench/answers: no MODEL given (a submission directory, a pack output or a quantize interchange)\n');
    return 2;
  }
  modelDir ??= join(root, '.ternforge', profile, 'fetch-model', 'outputs', 'model');
  const names = models.map((m, i) => `${i + 1}:${basename(m)}`);
  let floatReport = {};
  if (floatFrom !== undefined) {
    const earlier = readFloatFrom(floatFrom);
    if (typeof earlier === 'string') {
      process.stderr.write(`bench/answers: --float-from ${floatFrom}: ${earlier}\n`);
      return 2;
    }
    floatReport = { floatReport: earlier };
  }
  const run = await answerReports({ profile, modelDir, models: Object.fromEntries(names.map((n, i) => [n, models[i]!])), work: join(root, '.ternforge', 'bench', 'answers'), ...(maxTokens !== undefined ? { maxTokens } : {}), ...(frequencyPenalty !== undefined ? { frequencyPenalty } : {}), ...floatReport });
  for (const [n, rows] of Object.entries(run.retention)) process.stdout.write(`\n${n} = ${models[names.indexOf(n)]}\n\n${formatRetention(rows)}\n`);
  process.stdout.write(`\n${formatSideBySide(run)}\n`);
  mkdirSync(join(out, '..'), { recursive: true });
  writeFileSync(out, `${JSON.stringify({ profile, modelDir, serverArgs: samplingArgs(profile, frequencyPenalty), ...(floatFrom !== undefined ? { floatFrom } : {}), models: Object.fromEntries(names.map((n, i) => [n, models[i]])), seconds: run.seconds, retention: run.retention, reports: run.reports }, null, 2)}\n`);
  return 0;
}

/** The float model's report and server flags from an earlier output of this script, or why that file is not one. */
export function readFloatFrom(path: string): { report: AnswerReport; serverArgs: string[] } | string {
  let value: unknown;
  try {
    value = JSON.parse(readFileSync(path, 'utf8'));
  } catch (e) {
    return (e as Error).message;
  }
  const o = value as { serverArgs?: unknown; reports?: Record<string, unknown> } | null;
  if (o === null || typeof o !== 'object' || !Array.isArray(o.serverArgs) || !o.serverArgs.every((a) => typeof a === 'string')) return 'not an output of bench/answers.ts (no serverArgs list)';
  if (o.reports === undefined || typeof o.reports !== 'object' || o.reports[FLOAT] === undefined) return `holds no report named ${FLOAT}`;
  const errors = engineSchemaSet().validate(ANSWER_REPORT_SCHEMA, o.reports[FLOAT]);
  if (errors.length > 0) return `its ${FLOAT} report fails schemas/${ANSWER_REPORT_SCHEMA}: ${errors.join('; ')}`;
  return { report: o.reports[FLOAT] as AnswerReport, serverArgs: o.serverArgs as string[] };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  process.exitCode = await main(process.argv.slice(2));
}
