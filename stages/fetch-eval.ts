import { ok } from '../engine/result.ts';
import { defineStage } from '../engine/types.ts';
import type { FetchEvalParams } from '../schemas/generated/fetch-eval.ts';
import { stageFailed } from '../lib/failures.ts';
import { runWorkerCommand } from '../lib/worker-results.ts';
import { resolveHubPins } from './hub-pins.ts';

/**
 * fetch-eval: the graded benchmarks' real splits, for the eval stage only.
 *   <out>/<source>/<file>     each declared file, at its locked commit, bytes checked against the lock
 *   <out>/eval-data.json      what is there (schemas/eval-data.schema.json)
 * Every source has the role `evaluation` (the schema allows no other) and the stage's only downstream is eval,
 * which has no path to emit: the data-role graph keeps these bytes out of calibration, distillation and
 * every choice of defaults (lib/report/provenance.ts, EVALUATION_HOLDERS). Revisions are pinned like every hub
 * source: resolved once to a commit and file hashes in profiles/<profile>.lock.json (engine `pins` hook,
 * stages/hub-pins.ts); a gated dataset (GPQA) needs HF_TOKEN. With no sources (the small profiles) it writes
 * an empty index and the eval stage asks the project-written sets of data/eval/ instead.
 */
export const stage = defineStage<FetchEvalParams>({
  name: 'fetch-eval',
  summary: "Fetch the graded benchmarks' real splits at their locked commits (role evaluation; eval reads them)",
  code: [
    'stages/fetch-eval.ts',
    'stages/hub-pins.ts',
    'lib/worker-results.ts',
    'schemas/workers/fetch-eval-result.schema.json',
    'schemas/eval-data.schema.json',
    'python/ternforge/__main__.py',
    'python/ternforge/events.py',
    'python/ternforge/sources/eval_data.py',
    'python/ternforge/sources/checkpoint.py',
    'python/ternforge/sources/hub_lock.py',
  ],
  schema: 'schemas/stages/fetch-eval.schema.json',
  tools: ['python'],
  network: true,
  pins: {
    requests: (p) => (p.sources ?? []).map((s) => ({ name: s.name, kind: 'dataset', repo: s.dataset, ref: s.revision, files: Object.values(s.splits).flat() })),
    resolve: resolveHubPins,
  },
  async run(ctx) {
    const result = await runWorkerCommand(ctx, 'fetch-eval', { sources: ctx.params.sources ?? [], cache_dir: ctx.params.cache_dir, pins: ctx.pins, out: ctx.out });
    if (!result.ok) return stageFailed(ctx.stage, result.error);
    ctx.log(`fetch-eval: ${result.value.sources} source(s)`);
    return ok({ summary: { sources: result.value.sources } });
  },
});
