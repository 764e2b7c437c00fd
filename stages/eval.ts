/**
 * eval: the graded benchmarks asked of the emitted submission's own server through EleutherAI's
 * lm-evaluation-harness, and scored and normalised as the grader does (lib/eval/harness.ts). lm-eval's
 * `local-chat-completions` client sends every request through the recorder (lib/eval/recorder.ts), which
 * keeps each one's wall time and finish reason; lm-eval's own tasks and scorers read the replies (MATH-500:
 * math-verify), LiveCodeBench's code runs in the sandbox. The question sets' items are written as the
 * benchmarks' own dataset rows first (lib/eval/harness-data.ts). The same run against the full-precision
 * model is the measured ceiling: `eval.json` (with the predicted grade), `eval-float.json`, lm-eval's output
 * files under `lm-eval/`, and `eval.md` (the tables). The server is the emitted `server/ternforge_server` on
 * the emitted `weights/`, run by the workers' interpreter (smoke-serve already proved the offline wheel
 * install; reinstalling here would add a minute and measure nothing new). With `sweep` set, also
 * `sweep.json`, measured on `selection` sets only by lib/eval/run.ts's own client.
 *
 * Answer retention (lib/eval/answers.ts): the open-answer set is asked of the submission, then of the
 * full-precision model (fetch-model's checkpoint, served by the same server code with the submission's
 * sampling defaults, lib/eval/serve-model.ts); `answers.json` holds both reports and the per-kind
 * retention, and `eval.md` its table. Each JSON file is checked against its schema before it is written
 * (EVAL_OUTPUTS, lib/eval/run.ts: schemas/eval-report, answer-retention, sweep-record), and the report stage
 * reads it back through the same schema.
 *
 * Uncached: it measures a live server, which its declared inputs do not fully decide.
 */
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { prettyJson } from '../engine/digest.ts';
import { engineSchemaSet } from '../engine/json-io.ts';
import { err, ok } from '../engine/result.ts';
import { defineStage } from '../engine/types.ts';
import { stageFailed } from '../lib/failures.ts';
import { ANSWER_MAX_TOKENS, ANSWER_REPORT_SCHEMA, ANSWER_SET, formatRetention, loadAnswerSet, retentionTable, runAnswers, type AnswerReport } from '../lib/eval/answers.ts';
import { loadQuestionSets } from '../lib/eval/questions.ts';
import { runHarness } from '../lib/eval/harness.ts';
import { readEvalData, realData, setSummary, writeBenchmarkData } from '../lib/eval/harness-data.ts';
import { workerMathVerifier } from '../lib/eval/math-verify.ts';
import { EVAL_OUTPUTS, LM_EVAL_DIR } from '../lib/eval/run.ts';
import { formatGrade, formatTable, predictedGrade } from '../lib/eval/score.ts';
import { serving, writeFloatReference, type ServeOptions } from '../lib/eval/serve-model.ts';
import { requestFieldMeasure, sweep } from '../lib/eval/sweep.ts';
import { evidencePlaces } from '../lib/smoke/smoke.ts';
import { submissionNames } from '../lib/submission/layout.ts';
import type { EvalParams } from '../schemas/generated/eval.ts';

export const stage = defineStage<EvalParams>({
  name: 'eval',
  summary: "Ask the graded benchmarks of the served model through lm-evaluation-harness, scored and normalised like the grader",
  code: ['stages/eval.ts', 'lib/eval', 'schemas/eval-data.schema.json', 'lib/worker-results.ts', 'python/ternforge/harness.py', 'python/ternforge/harness_tasks', 'python/ternforge/mathcheck.py', 'schemas/workers/math-verify-result.schema.json', 'schemas/workers/harness-result.schema.json', 'lib/contract.ts', 'schemas/contract.json', 'lib/failures.ts', 'lib/pack/pack-interchange.ts', 'lib/pack/layout.ts', 'lib/smoke/smoke.ts', 'lib/smoke/runner.ts', 'lib/safetensors', 'lib/submission/layout.ts', 'lib/submission/wheels.ts', 'schemas/eval-question.schema.json', ...Object.values(EVAL_OUTPUTS).map((o) => `schemas/${o.schema}`), `schemas/${ANSWER_REPORT_SCHEMA}`],
  schema: 'schemas/stages/eval.schema.json',
  inputs: (p, root) => [...evalSetPaths(p, root), answerSetPath(p), ...(p.sweep === undefined ? [] : sweepSetPaths(p, root))],
  tools: ['node', 'python', 'torch'],
  outputs: 'uncached',
  async run(ctx) {
    const p = ctx.params;
    const sets = await loadQuestionSets(evalSetPaths(p, ctx.root), ctx.root);
    if (!sets.ok) return stageFailed(ctx.stage, sets.error);
    const sweepSets = p.sweep === undefined ? null : await loadQuestionSets(sweepSetPaths(p, ctx.root), ctx.root);
    if (sweepSets !== null && !sweepSets.ok) return stageFailed(ctx.stage, sweepSets.error);

    const answerSet = await loadAnswerSet(join(ctx.root, answerSetPath(p)), ctx.root);
    if (!answerSet.ok) return stageFailed(ctx.stage, answerSet.error);

    const scratch = mkdtempSync(join(tmpdir(), 'ternforge-eval-'));
    try {
      const common = {
        concurrency: p.concurrency ?? 16,
        timeoutMs: (p.timeoutS ?? 300) * 1000,
        ...(p.model !== undefined ? { model: p.model } : {}),
        signal: ctx.signal,
      };
      const sandbox = {
        ...(p.sandbox?.timeLimitS !== undefined ? { timeLimitMs: p.sandbox.timeLimitS * 1000 } : {}),
        ...(p.sandbox?.memoryMiB !== undefined ? { memoryBytes: p.sandbox.memoryMiB * 2 ** 20 } : {}),
        ...(p.sandbox?.outputBytes !== undefined ? { outputBytes: p.sandbox.outputBytes } : {}),
        ...(p.sandbox?.concurrency !== undefined ? { concurrency: p.sandbox.concurrency } : {}),
      };
      const maxTokens = p.maxTokens ?? 4096;
      const answerOptions = { ...common, set: answerSet.value, maxTokens: p.answers?.maxTokens ?? ANSWER_MAX_TOKENS };
      const submission = ctx.upstream('emit');
      const serve = (dir: string, name: string): ServeOptions => ({ python: ctx.python, serverPath: join(submission, submissionNames().SERVER_DIR), dir, scratch: join(scratch, name), startupLimitMs: (p.startupLimitS ?? 300) * 1000, signal: ctx.signal });

      // the benchmarks' real splits where fetch-eval fetched them, else the project-written sets in their rows
      const index = readEvalData(ctx.upstream('fetch-eval'));
      if (!index.ok) return stageFailed(ctx.stage, index.error);
      const real = realData(index.value, ctx.upstream('fetch-eval'));
      const realBenchmarks = new Set(real.data.map((d) => d.benchmark));
      const own = sets.value.filter((s) => !realBenchmarks.has(s.set.benchmark));
      const rows = writeBenchmarkData(own, join(scratch, 'data'));
      if (!rows.ok) return stageFailed(ctx.stage, rows.error);
      const written = rows.value;
      const origin = new Map([...written.origin, ...real.sets.map((s) => [s.benchmark, s.name] as const)]);
      if (real.sets.length > 0) ctx.log(`real splits: ${real.sets.map((s) => `${s.name} (${s.path})`).join(', ')}`);
      const harness = (name: 'submission' | 'float', baseUrl: string) =>
        runHarness({
          baseUrl,
          data: [...real.data, ...written.data],
          sets: [...real.sets, ...own.map(setSummary)],
          origin,
          worker: ctx,
          scratch: join(scratch, `harness-${name}`),
          keep: { dir: join(ctx.out, LM_EVAL_DIR, name), keptAs: `${LM_EVAL_DIR}/${name}`, places: evidencePlaces({ scratch, python: ctx.python, workdir: ctx.workdir, root: ctx.root }) },
          concurrency: common.concurrency,
          maxTokens,
          timeoutMs: common.timeoutMs,
          model: p.model ?? 'ternforge',
          ...(p.limit !== undefined ? { limit: p.limit } : {}),
          sandbox,
          signal: ctx.signal,
          log: (line: string) => ctx.log(`${name}: ${line}`),
        });

      const served = await serving(serve(submission, 'submission'), async (baseUrl) => {
        ctx.log(`submission served on ${baseUrl}; lm-eval asks it through the recorder`);
        if (sweepSets !== null && p.sweep !== undefined) {
          const record = await sweep({
            parameter: p.sweep.parameter,
            values: p.sweep.values,
            sets: sweepSets.value,
            measure: requestFieldMeasure({ ...common, baseUrl, maxTokens, sandbox, mathVerify: workerMathVerifier(ctx) }, p.sweep.parameter),
          });
          if (!record.ok) return err(record.error);
          writeOutput(ctx.out, 'sweep', record.value);
          ctx.log(`sweep ${p.sweep.parameter}: chose ${record.value.chosen} (${record.value.rule})`);
        }
        const report = await harness('submission', baseUrl);
        if (!report.ok) return report;
        const ternary: AnswerReport = await runAnswers({ ...answerOptions, baseUrl });
        return ok({ report: report.value, ternary });
      });
      if (!served.ok) return stageFailed(ctx.stage, served.error);
      if (ctx.signal.aborted) return err({ reason: 'interrupted', stage: ctx.stage });

      const architecture = join(submission, submissionNames().ARCHITECTURE);
      const reference = await writeFloatReference(join(ctx.upstream('fetch-model'), 'model'), existsSync(architecture) ? architecture : null, join(scratch, 'float-reference'));
      if (!reference.ok) return stageFailed(ctx.stage, { reason: 'submission-input-invalid', path: join(ctx.upstream('fetch-model'), 'model'), detail: reference.error });
      ctx.log('serving the full-precision reference: the same lm-eval run is the measured ceiling');
      const floatServed = await serving(serve(reference.value, 'float'), async (baseUrl) => {
        const report = await harness('float', baseUrl);
        if (!report.ok) return report;
        return ok({ report: report.value, answers: await runAnswers({ ...answerOptions, baseUrl }) });
      });
      if (!floatServed.ok) return stageFailed(ctx.stage, floatServed.error);
      if (ctx.signal.aborted) return err({ reason: 'interrupted', stage: ctx.stage });

      const { report, ternary } = served.value;
      const floatReport = floatServed.value.report;
      const retention = retentionTable(floatServed.value.answers, ternary);
      const grade = predictedGrade(report.table, floatReport.table);
      writeOutput(ctx.out, 'report', { ...report, grade });
      writeOutput(ctx.out, 'float', floatReport);
      writeOutput(ctx.out, 'answers', { version: 1, retention, float: floatServed.value.answers, ternary });
      const table = formatTable(report.table);
      const grades = formatGrade(grade);
      const answers = formatRetention(retention);
      const set = answerSet.value;
      const tasks = (report.harness?.tasks ?? []).map((t) => `- ${t.benchmark}: \`${t.task}\` (${t.referenceTask === null ? 'ours, in lm-eval\'s format' : `lm-eval's \`${t.referenceTask}\``}), filter \`${t.filter}\`, metric \`${t.metric}\``).join('\n');
      writeFileSync(
        join(ctx.out, 'eval.md'),
        `# Evaluation of ${ctx.profile}\n\nlm-eval ${report.harness?.lmEval} (math-verify ${report.harness?.mathVerify}), \`local-chat-completions\`, ${common.concurrency} in flight, zero-shot, greedy, max_tokens ${maxTokens}, ${common.timeoutMs / 1000} s per request; a reply cut at max_tokens, past the deadline or failed scores zero and is counted apart. Its output files: \`${LM_EVAL_DIR}/\`.\n\n${tasks}\n\n${table}\n\n## Predicted grade\n\nThe same run against the full-precision model (fetch-model's checkpoint) served by the same server is the measured ceiling; the grader's ceiling is its bf16 reference.\n\n${grades}\n\n## Answer retention\n\n${set.set.questions.length} open-answer questions of \`${set.path}\` (role evaluation), asked of the submission and of the full-precision model (fetch-model's checkpoint) through the same server, greedy, max_tokens ${answerOptions.maxTokens}; retention = ternary accuracy / float accuracy (open answers have no chance level, so this is also the grader's normalisation with the float model as the ceiling).\n\n${answers}\n`,
      );
      for (const line of [...table.split('\n'), ...grades.split('\n'), ...answers.split('\n')]) ctx.log(line);
      const all = retention[retention.length - 1]!;
      return ok({
        summary: {
          meanScore: report.table.meanScore,
          predictedGrade: grade.meanMeasured,
          rows: report.table.rows.length,
          questions: report.questions.length,
          answerAccuracy: { float: all.floatAccuracy, ternary: all.ternaryAccuracy },
          answerRetention: all.retention,
        },
      });
    } finally {
      rmSync(scratch, { recursive: true, force: true });
    }
  },
});

/** Write one of EVAL_OUTPUTS after checking it against its schema: a report off its own schema is a bug here. */
function writeOutput(out: string, key: keyof typeof EVAL_OUTPUTS, value: unknown): void {
  const { file, schema } = EVAL_OUTPUTS[key];
  engineSchemaSet().check(schema, value, file);
  writeFileSync(join(out, file), prettyJson(value));
}

function answerSetPath(p: EvalParams): string {
  return p.answers?.set ?? ANSWER_SET;
}

/** Repository-relative question set files: the profile's, or every `*.json` in the default directory. */
function jsonFilesIn(root: string, dir: string): string[] {
  return readdirSync(join(root, dir)).filter((f) => f.endsWith('.json')).sort().map((f) => `${dir}/${f}`);
}
function evalSetPaths(p: EvalParams, root: string): string[] {
  return p.sets ?? jsonFilesIn(root, 'data/eval');
}
function sweepSetPaths(p: EvalParams, root: string): string[] {
  return p.sweep?.sets ?? jsonFilesIn(root, 'data/selection');
}
