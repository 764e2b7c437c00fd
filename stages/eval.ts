/**
 * eval: benchmark-style questions against the emitted submission's own server, scored and normalised like
 * the grader (lib/eval). The server is the emitted `server/ternforge_server` on the emitted `weights/`,
 * run by the workers' interpreter (smoke-serve already proved the offline wheel install; reinstalling
 * here would add a minute and measure nothing new). Writes `eval.json` (the whole report) and `eval.md`
 * (the table); with `sweep` set, also `sweep.json`, measured on `selection` sets only.
 *
 * Answer retention (lib/eval/answers.ts): the open-answer set is asked of the submission, then of the
 * full-precision model (fetch-model's checkpoint, served by the same server code with the submission's
 * sampling defaults, lib/eval/float-reference.ts); `answers.json` holds both reports and the per-kind
 * retention, and `eval.md` its table.
 *
 * Uncached: it measures a live server, which its declared inputs do not fully decide.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { prettyJson } from '../engine/digest.ts';
import type { Failure } from '../engine/failure.ts';
import { err, ok, type Result } from '../engine/result.ts';
import { defineStage } from '../engine/types.ts';
import { formatRetention, loadAnswerSet, retentionTable, runAnswers, type AnswerReport } from '../lib/eval/answers.ts';
import { writeFloatReference } from '../lib/eval/float-reference.ts';
import { loadQuestionSets } from '../lib/eval/questions.ts';
import { runEval, type EvalReport } from '../lib/eval/run.ts';
import { formatTable } from '../lib/eval/score.ts';
import { requestFieldMeasure, sweep } from '../lib/eval/sweep.ts';
import { stopGroup } from '../lib/smoke/runner.ts';
import { freePort } from '../lib/smoke/smoke.ts';
import type { EvalParams } from '../schemas/generated/eval.ts';

export const stage = defineStage<EvalParams>({
  name: 'eval',
  summary: 'Score benchmark-style questions against the served model, normalised like the grader',
  code: ['stages/eval.ts', 'lib/eval', 'lib/smoke/smoke.ts', 'lib/smoke/runner.ts', 'lib/safetensors', 'lib/submission/layout.ts', 'lib/submission/wheels.ts'],
  schema: 'schemas/stages/eval.schema.json',
  inputs: (p, root) => [...evalSetPaths(p, root), answerSetPath(p), ...(p.sweep === undefined ? [] : sweepSetPaths(p, root))],
  tools: ['node', 'python', 'torch'],
  outputs: 'uncached',
  async run(ctx) {
    const p = ctx.params;
    const sets = await loadQuestionSets(evalSetPaths(p, ctx.root), ctx.root);
    if (!sets.ok) return sets;
    const sweepSets = p.sweep === undefined ? null : await loadQuestionSets(sweepSetPaths(p, ctx.root), ctx.root);
    if (sweepSets !== null && !sweepSets.ok) return sweepSets;

    const answerSet = await loadAnswerSet(join(ctx.root, answerSetPath(p)), ctx.root);
    if (!answerSet.ok) return answerSet;

    const scratch = mkdtempSync(join(tmpdir(), 'ternforge-eval-'));
    try {
      const common = {
        concurrency: p.concurrency ?? 16,
        timeoutMs: (p.timeoutS ?? 300) * 1000,
        ...(p.model !== undefined ? { model: p.model } : {}),
        signal: ctx.signal,
      };
      const answerOptions = { ...common, set: answerSet.value, maxTokens: p.answers?.maxTokens ?? ANSWER_MAX_TOKENS };
      const served = await serving(ctx.python, ctx.upstream('emit'), ctx.upstream('emit'), join(scratch, 'submission'), (p.startupLimitS ?? 300) * 1000, ctx.signal, async (baseUrl) => {
        ctx.log(`submission served on ${baseUrl}`);
        const evalCommon = {
          ...common,
          baseUrl,
          maxTokens: p.maxTokens ?? 4096,
          sandbox: {
            ...(p.sandbox?.timeLimitS !== undefined ? { timeLimitMs: p.sandbox.timeLimitS * 1000 } : {}),
            ...(p.sandbox?.memoryMiB !== undefined ? { memoryBytes: p.sandbox.memoryMiB * 2 ** 20 } : {}),
            ...(p.sandbox?.outputBytes !== undefined ? { outputBytes: p.sandbox.outputBytes } : {}),
            ...(p.sandbox?.concurrency !== undefined ? { concurrency: p.sandbox.concurrency } : {}),
          },
        };
        if (sweepSets !== null && p.sweep !== undefined) {
          const record = await sweep({
            parameter: p.sweep.parameter,
            values: p.sweep.values,
            sets: sweepSets.value,
            measure: requestFieldMeasure(evalCommon, p.sweep.parameter),
          });
          if (!record.ok) return record;
          writeFileSync(join(ctx.out, 'sweep.json'), prettyJson(record.value));
          ctx.log(`sweep ${p.sweep.parameter}: chose ${record.value.chosen} (${record.value.rule})`);
        }
        const report: EvalReport = await runEval({ ...evalCommon, sets: sets.value });
        const ternary: AnswerReport = await runAnswers({ ...answerOptions, baseUrl });
        return ok({ report, ternary });
      });
      if (!served.ok) return served;
      if (ctx.signal.aborted) return err({ reason: 'interrupted', stage: ctx.stage });

      const reference = await writeFloatReference(join(ctx.upstream('fetch-model'), 'model'), ctx.upstream('emit'), join(scratch, 'float-reference'));
      if (!reference.ok) return err({ reason: 'stage-failed', stage: ctx.stage, detail: reference.error });
      const floatServed = await serving(ctx.python, ctx.upstream('emit'), reference.value, join(scratch, 'float'), (p.startupLimitS ?? 300) * 1000, ctx.signal, async (baseUrl) => {
        ctx.log(`full-precision reference served on ${baseUrl}`);
        return ok(await runAnswers({ ...answerOptions, baseUrl }));
      });
      if (!floatServed.ok) return floatServed;
      if (ctx.signal.aborted) return err({ reason: 'interrupted', stage: ctx.stage });

      const { report, ternary } = served.value;
      const retention = retentionTable(floatServed.value, ternary);
      writeFileSync(join(ctx.out, 'eval.json'), prettyJson(report));
      writeFileSync(join(ctx.out, 'answers.json'), prettyJson({ version: 1, retention, float: floatServed.value, ternary }));
      const table = formatTable(report.table);
      const answers = formatRetention(retention);
      const set = answerSet.value;
      writeFileSync(
        join(ctx.out, 'eval.md'),
        `# Evaluation of ${ctx.profile}\n\n${table}\n\n## Answer retention\n\n${set.set.questions.length} open-answer questions of \`${set.path}\` (role evaluation), asked of the submission and of the full-precision model (fetch-model's checkpoint) through the same server, greedy, max_tokens ${answerOptions.maxTokens}; retention = ternary accuracy / float accuracy (open answers have no chance level, so this is also the grader's normalisation with the float model as the ceiling).\n\n${answers}\n`,
      );
      for (const line of [...table.split('\n'), ...answers.split('\n')]) ctx.log(line);
      const all = retention[retention.length - 1]!;
      return ok({
        summary: {
          meanScore: report.table.meanScore,
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

/** The default `max_tokens` of answer requests: the float smol model's right answers end well within it. */
const ANSWER_MAX_TOKENS = 128;
/** The default answer set. */
const ANSWER_SET = 'data/answers/everyday.json';
function answerSetPath(p: EvalParams): string {
  return p.answers?.set ?? ANSWER_SET;
}

/**
 * Serve the model of `dir` with the submission's server code (`<submission>/server`), run `use` against
 * it, stop it. The server writes nothing into `dir`.
 */
async function serving<T>(python: string, submission: string, dir: string, scratch: string, limitMs: number, signal: AbortSignal, use: (baseUrl: string) => Promise<Result<T, Failure>>): Promise<Result<T, Failure>> {
  mkdirSync(scratch, { recursive: true });
  const port = await freePort();
  const server = startServer(python, submission, dir, port, scratch);
  let serverLog = '';
  server.stderr?.on('data', (b: Buffer) => (serverLog = (serverLog + b.toString()).slice(-20_000)));
  try {
    const baseUrl = `http://127.0.0.1:${port}`;
    const ready = await waitHealthy(baseUrl, limitMs, server, signal);
    if (!ready.ok) return err({ reason: 'stage-failed', stage: 'eval', detail: `serving ${dir}: ${ready.error}; server log tail:\n${serverLog.split('\n').slice(-20).join('\n')}` });
    return await use(baseUrl);
  } finally {
    if (server.pid !== undefined) await stopGroup(server.pid, () => server.exitCode !== null || server.signalCode !== null);
  }
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

/** The emitted server code serving `dir` on its own process group, offline, writing nothing into `dir`. */
function startServer(python: string, submission: string, dir: string, port: number, scratch: string): ChildProcess {
  return spawn(python, ['-m', 'ternforge_server', '--dir', dir, '--host', '127.0.0.1', '--port', String(port), '--startup-report', join(scratch, 'startup-report.json')], {
    detached: true,
    stdio: ['ignore', 'ignore', 'pipe'],
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      HOME: scratch,
      TMPDIR: scratch,
      PYTHONPATH: join(submission, 'server'),
      PYTHONDONTWRITEBYTECODE: '1',
      HF_HUB_OFFLINE: '1',
      TRANSFORMERS_OFFLINE: '1',
    },
  });
}

/** Seconds until `/health` answered 200; an error when the server exits or the limit passes first. */
async function waitHealthy(baseUrl: string, limitMs: number, server: ChildProcess, signal: AbortSignal): Promise<Result<number, string>> {
  const t0 = performance.now();
  while (performance.now() - t0 < limitMs) {
    if (signal.aborted) return { ok: false, error: 'interrupted' };
    if (server.exitCode !== null || server.signalCode !== null) return { ok: false, error: `the server exited (${server.exitCode ?? server.signalCode}) before /health answered 200` };
    const status = await fetch(`${baseUrl}/health`, { signal: AbortSignal.timeout(2000) }).then((r) => r.status, () => 0);
    if (status === 200) return ok((performance.now() - t0) / 1000);
    await new Promise((r) => setTimeout(r, 250));
  }
  return { ok: false, error: `/health did not answer 200 within ${limitMs / 1000} s` };
}
