/**
 * smoke-serve: starts serve.sh from the emitted directory in a clean environment, offline (a network
 * namespace with only loopback up, when permitted), and checks gates 4-6 of DESIGN.md: /health 200
 * within the start-up limit, one request as graded plus `concurrency` at once all well-formed within the
 * deadline, /health afterwards. Writes `smoke.json` (schemas/smoke-report.schema.json), `serve.log` and
 * the server's `startup-report.json`; fails naming each failed gate. The server's whole process group
 * is ended at the end, always (abort included). The scratch lies in `.ternforge/<profile>/smoke-serve/`;
 * what a SIGKILLed run left there (processes and directory) the next run ends first.
 *
 * Uncached: it measures a live process, whose result its declared inputs do not fully decide.
 */
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { prettyJson } from '../engine/digest.ts';
import { withPlaceholders } from '../engine/host-paths.ts';
import { SchemaSet } from '../engine/json-io.ts';
import { err, ok } from '../engine/result.ts';
import { defineStage } from '../engine/types.ts';
import { stageFailed } from '../lib/failures.ts';
import { prepareScratch, scratchBase } from '../lib/smoke/scratch.ts';
import { evidencePlaces, runSmoke, venvBaseDir } from '../lib/smoke/smoke.ts';
import type { SmokeServeParams } from '../schemas/generated/smoke-serve.ts';

export const stage = defineStage<SmokeServeParams>({
  name: 'smoke-serve',
  summary: 'Start serve.sh offline from the emitted directory and check gates 4-6 (start-up, load, health after load)',
  code: ['stages/smoke-serve.ts', 'lib/smoke/smoke.ts', 'lib/smoke/runner.ts', 'lib/smoke/scratch.ts', 'engine/host-paths.ts', 'schemas/smoke-report.schema.json'],
  schema: 'schemas/stages/smoke-serve.schema.json',
  tools: ['node'],
  outputs: 'uncached',
  async run(ctx) {
    const p = ctx.params;
    // A run killed with SIGKILL could not end its runner and server or remove its scratch: the next
    // run does (lib/smoke/scratch.ts).
    const scratch = await prepareScratch(scratchBase(ctx.workdir, ctx.profile), (l) => ctx.log(l));
    try {
      const pythonDir = p.python !== undefined ? join(p.python, '..') : venvBaseDir(ctx.python);
      const r = await runSmoke({
        submission: ctx.upstream('emit'),
        scratch,
        maxTokens: p.max_tokens ?? 64,
        concurrency: p.concurrency ?? 16,
        deadlineS: p.deadline_s ?? 300,
        startupLimitS: p.startup_limit_s ?? 300,
        requireStop: p.require_stop ?? false,
        namespace: p.network_namespace ?? 'auto',
        ...(pythonDir !== undefined ? { pythonDir } : {}),
        signal: ctx.signal,
        log: (l) => ctx.log(l),
      });
      if (ctx.signal.aborted) return err({ reason: 'interrupted', stage: ctx.stage });
      if (!r.ok) return stageFailed(ctx.stage, { reason: 'smoke-not-run', detail: r.error });
      const report = r.value;
      new SchemaSet(join(ctx.root, 'schemas')).check('smoke-report.schema.json', report, 'smoke.json');
      // The evidence names no path of this machine: the scratch copy is `<scratch>`, the interpreter's
      // directory `<python>`, the venv `<venv>`, the workdir `<workdir>`, the repository `.`, home `~`, temp `<tmp>`.
      const places = evidencePlaces({ scratch, python: ctx.python, pythonDir, workdir: ctx.workdir, root: ctx.root });
      writeFileSync(join(ctx.out, 'smoke.json'), withPlaceholders(prettyJson(report), places));
      for (const f of ['serve.log', 'startup-report.json']) {
        if (existsSync(join(scratch, f))) writeFileSync(join(ctx.out, f), withPlaceholders(readFileSync(join(scratch, f), 'utf8'), places));
      }

      for (const g of report.gates) ctx.log(`gate ${g.gate} (${g.name}): ${g.status}${g.detail !== undefined ? `: ${g.detail}` : ''}`);
      const s = report.startup;
      ctx.log(`start-up: /health 200 after ${s.health_200_s ?? '-'} s; phases ${JSON.stringify(s.phases ?? {})}`);
      if (report.load !== null) ctx.log(`load: ${report.load.ok}/${report.load.concurrency} ok in ${report.load.wall_s} s, finish_reason ${JSON.stringify(report.load.finish_reasons)}, ${report.load.tokens_per_s} tok/s, /health p99 ${report.load.health_during.p99_ms ?? '-'} ms`);
      const summary = {
        passed: report.passed,
        isolation: report.isolation,
        health_200_s: s.health_200_s,
        phases: s.phases ?? {},
        graded: report.graded === null ? null : { ok: report.graded.ok, latency_s: report.graded.latency_s, finish_reason: report.graded.finish_reason },
        load: report.load === null ? null : { ok: report.load.ok, wall_s: report.load.wall_s, finish_reasons: report.load.finish_reasons, tokens_per_s: report.load.tokens_per_s, health_p99_ms: report.load.health_during.p99_ms },
        health_after: report.health_after?.status ?? null,
      };
      if (!report.passed) {
        const failed = report.gates.filter((g) => g.status === 'failed');
        return stageFailed(ctx.stage, {
          reason: 'smoke-gates-failed',
          gates: failed.map((g) => ({ gate: g.gate, name: g.name, detail: g.detail ?? '' })),
          figures: { failed_gates: report.failed_gates, ...summary },
          serveLogTail: report.server.log_tail.split('\n').slice(-15).join('\n'),
        });
      }
      return ok({ summary });
    } finally {
      rmSync(scratch, { recursive: true, force: true });
    }
  },
});
