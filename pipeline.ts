/**
 * The ternforge pipeline: which stages exist and what each one needs. Nothing else lives here;
 * the engine (engine/) runs it and each stage's work lives in stages/<name>.ts.
 *
 *   tsx pipeline.ts all | <stage> | status [--why] [--json] | dag [--mermaid] | gc | verify <dir> | preflight   [--profile tiny]
 */
import { runCli } from './engine/cli.ts';
import type { PipelineDecl } from './engine/types.ts';
import { stage as pythonEnv } from './stages/python-env.ts';
import { stage as fetchModel } from './stages/fetch-model.ts';
import { stage as fetchCalib } from './stages/fetch-calib.ts';
import { stage as fetchEval } from './stages/fetch-eval.ts';
import { stage as quantize } from './stages/quantize.ts';
import { stage as pack } from './stages/pack.ts';
import { stage as quality } from './stages/quality.ts';
import { stage as audit } from './stages/audit.ts';
import { stage as vendorWheels } from './stages/vendor-wheels.ts';
import { stage as emit } from './stages/emit.ts';
import { stage as smokeServe } from './stages/smoke-serve.ts';
import { stage as evaluate } from './stages/eval.ts';
import { stage as report } from './stages/report.ts';
import { verifyCommand } from './lib/audit/verify-command.ts';
import { preflightCommand } from './lib/preflight/command.ts';

export const pipeline: PipelineDecl = {
  stages: [
    { stage: pythonEnv, needs: [] },
    { stage: fetchModel, needs: ['python-env'] },
    { stage: fetchCalib, needs: ['python-env', 'fetch-model'] },
    { stage: fetchEval, needs: ['python-env'] },
    { stage: quantize, needs: ['python-env', 'fetch-model', 'fetch-calib'] },
    { stage: pack, needs: ['quantize'] },
    { stage: quality, needs: ['python-env', 'fetch-model', 'fetch-calib', 'pack'] },
    { stage: audit, needs: ['fetch-model', 'pack'] },
    { stage: vendorWheels, needs: ['python-env'] },
    { stage: emit, needs: ['fetch-model', 'pack', 'audit', 'vendor-wheels'] },
    { stage: smokeServe, needs: ['emit'] },
    { stage: evaluate, needs: ['fetch-model', 'fetch-eval', 'emit', 'smoke-serve'] },
    { stage: report, needs: ['fetch-model', 'fetch-calib', 'quantize', 'pack', 'quality', 'audit', 'vendor-wheels', 'emit', 'smoke-serve', 'eval'] },
  ],
  links: { weights: 'pack/weights', wheels: 'vendor-wheels/wheels', evidence: 'report/evidence' },
  publish: { 'dist/{profile}': 'report' },
};

if (import.meta.url === `file://${process.argv[1]}`) {
  process.exitCode = await runCli(pipeline, { root: import.meta.dirname, commands: [verifyCommand, preflightCommand] });
}
