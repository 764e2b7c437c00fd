/**
 * eval: benchmark-style questions against the emitted submission's own server, scored and normalised like
 * the grader (lib/eval). The server is the emitted `server/ternforge_server` on the emitted `weights/`,
 * run by the workers' interpreter (smoke-serve already proved the offline wheel install; reinstalling
 * here would add a minute and measure nothing new). Writes `eval.json` (the whole report) and `eval.md`
 * (the table); with `sweep` set, also `sweep.json`, measured on `selection` sets only.
 *
 * Uncached: it measures a live server, which its declared inputs do not fully decide.
 */
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { prettyJson } from '../engine/digest.ts';
import { err, ok, type Result } from '../engine/result.ts';
import { defineStage } from '../engine/types.ts';
import { stageFailed } from '../lib/failures.ts';
import { loadQuestionSets } from '../lib/eval/questions.ts';
import { runEval, type EvalReport } from '../lib/eval/run.ts';
import { formatTable } from '../lib/eval/score.ts';
import { requestFieldMeasure, sweep } from '../lib/eval/sweep.ts';
import { stopGroup } from '../lib/smoke/runner.ts';
import { freePort } from '../lib/smoke/smoke.ts';
import type { EvalParams } from '../schemas/generated/eval.ts';
import type { ProcessPromise } from 'zx';

export const stage = defineStage<EvalParams>({
  name: 'eval',
  summary: 'Score benchmark-style questions against the served model, normalised like the grader',
  code: ['stages/eval.ts', 'lib/eval', 'lib/smoke/smoke.ts', 'lib/smoke/runner.ts'],
  schema: 'schemas/stages/eval.schema.json',
  inputs: (p, root) => [...evalSetPaths(p, root), ...(p.sweep === undefined ? [] : sweepSetPaths(p, root))],
  tools: ['node', 'python', 'torch'],
  outputs: 'uncached',
  async run(ctx) {
    const p = ctx.params;
    const sets = await loadQuestionSets(evalSetPaths(p, ctx.root), ctx.root);
    if (!sets.ok) return stageFailed(ctx.stage, sets.error);
    const sweepSets = p.sweep === undefined ? null : await loadQuestionSets(sweepSetPaths(p, ctx.root), ctx.root);
    if (sweepSets !== null && !sweepSets.ok) return stageFailed(ctx.stage, sweepSets.error);

    const scratch = mkdtempSync(join(tmpdir(), 'ternforge-eval-'));
    const port = await freePort();
    const server = await startServer(ctx.python, ctx.upstream('emit'), port, scratch);
    let serverLog = '';
    server.process.stderr.on('data', (b: Buffer) => (serverLog = (serverLog + b.toString()).slice(-20_000)));
    try {
      const baseUrl = `http://127.0.0.1:${port}`;
      const ready = await waitHealthy(baseUrl, (p.startupLimitS ?? 300) * 1000, server, ctx.signal);
      if (!ready.ok) return stageFailed(ctx.stage, { reason: 'server-not-ready', detail: ready.error, logTail: serverLog.split('\n').slice(-20).join('\n') });
      ctx.log(`server ready on ${baseUrl} after ${ready.value.toFixed(1)} s`);

      const common = {
        baseUrl,
        concurrency: p.concurrency ?? 16,
        maxTokens: p.maxTokens ?? 4096,
        timeoutMs: (p.timeoutS ?? 300) * 1000,
        ...(p.model !== undefined ? { model: p.model } : {}),
        sandbox: {
          ...(p.sandbox?.timeLimitS !== undefined ? { timeLimitMs: p.sandbox.timeLimitS * 1000 } : {}),
          ...(p.sandbox?.memoryMiB !== undefined ? { memoryBytes: p.sandbox.memoryMiB * 2 ** 20 } : {}),
          ...(p.sandbox?.outputBytes !== undefined ? { outputBytes: p.sandbox.outputBytes } : {}),
          ...(p.sandbox?.concurrency !== undefined ? { concurrency: p.sandbox.concurrency } : {}),
        },
        signal: ctx.signal,
      };
      if (sweepSets !== null && p.sweep !== undefined) {
        const record = await sweep({
          parameter: p.sweep.parameter,
          values: p.sweep.values,
          sets: sweepSets.value,
          measure: requestFieldMeasure(common, p.sweep.parameter),
        });
        if (!record.ok) return stageFailed(ctx.stage, record.error);
        writeFileSync(join(ctx.out, 'sweep.json'), prettyJson(record.value));
        ctx.log(`sweep ${p.sweep.parameter}: chose ${record.value.chosen} (${record.value.rule})`);
      }
      const report: EvalReport = await runEval({ ...common, sets: sets.value });
      if (ctx.signal.aborted) return err({ reason: 'interrupted', stage: ctx.stage });
      writeFileSync(join(ctx.out, 'eval.json'), prettyJson(report));
      const table = formatTable(report.table);
      writeFileSync(join(ctx.out, 'eval.md'), `# Evaluation of ${ctx.profile}\n\n${table}\n`);
      for (const line of table.split('\n')) ctx.log(line);
      return ok({ summary: { meanScore: report.table.meanScore, rows: report.table.rows.length, questions: report.questions.length } });
    } finally {
      if (server.process.pid !== undefined) await stopGroup(server.process.pid, () => server.exit() !== null);
      rmSync(scratch, { recursive: true, force: true });
    }
  },
});

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

/** The running server (zx) and how it ended: null while it runs, else its exit code or signal. */
interface Server {
  process: ProcessPromise;
  exit: () => string | null;
}

/**
 * The emitted server on its own process group (zx, detached), offline, writing nothing into the emitted
 * directory. Stopping it is lib/smoke/runner.ts `stopGroup` (SIGTERM to the group, SIGKILL after 10 s).
 */
async function startServer(python: string, submission: string, port: number, scratch: string): Promise<Server> {
  const { $ } = await import('zx');
  let exit: string | null = null;
  const process_ = $({
    detached: true,
    nothrow: true,
    quiet: true,
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
  })`${python} -m ternforge_server --dir ${submission} --host 127.0.0.1 --port ${String(port)} --startup-report ${join(scratch, 'startup-report.json')}`;
  void process_.then((out) => (exit = String(out.exitCode ?? out.signal)));
  return { process: process_, exit: () => exit };
}

/** Seconds until `/health` answered 200; an error when the server exits or the limit passes first. */
async function waitHealthy(baseUrl: string, limitMs: number, server: Server, signal: AbortSignal): Promise<Result<number, string>> {
  const t0 = performance.now();
  while (performance.now() - t0 < limitMs) {
    if (signal.aborted) return { ok: false, error: 'interrupted' };
    if (server.exit() !== null) return { ok: false, error: `the server exited (${server.exit()}) before /health answered 200` };
    const status = await fetch(`${baseUrl}/health`, { signal: AbortSignal.timeout(2000) }).then((r) => r.status, () => 0);
    if (status === 200) return ok((performance.now() - t0) / 1000);
    await new Promise((r) => setTimeout(r, 250));
  }
  return { ok: false, error: `/health did not answer 200 within ${limitMs / 1000} s` };
}
