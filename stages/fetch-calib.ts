import { join } from 'node:path';
import { ok } from '../engine/result.ts';
import { defineStage } from '../engine/types.ts';
import type { FetchCalibParams } from '../schemas/generated/fetch-calib.ts';
import { stageFailed } from '../lib/failures.ts';
import { runWorkerCommand } from '../lib/worker-results.ts';
import { resolveHubPins } from './hub-pins.ts';

/**
 * fetch-calib: the profile's declared text sources to token files and the data manifest.
 *   <out>/tokens/<role>/<source>.safetensors   I32 input_ids + I64 doc_offsets, one file per source
 *   <out>/data_manifest.json                   every source, its role, documents, tokens and sha256s
 * The work is the Python worker command `fetch-calib` (python/ternforge/calib/), tokenising with
 * fetch-model's tokenizer. A source that breaks a data rule (a benchmark, or a validation/test/dev split,
 * with a role other than `evaluation`) or that cannot be read here is a `failure` event, refused before
 * anything is read. `hub-files` sources are pinned: each `revision` (branch, tag or commit) is resolved once
 * to its commit and the declared files' sha256, kept in profiles/<profile>.lock.json; reads use that commit
 * and refuse bytes that differ (engine `pins` hook, stages/hub-pins.ts).
 */
export const stage = defineStage<FetchCalibParams>({
  name: 'fetch-calib',
  summary: 'Tokenise declared calibration/held-out sources and write the data manifest',
  code: [
    'stages/fetch-calib.ts',
    'stages/hub-pins.ts',
    'lib/worker-results.ts',
    'schemas/workers/fetch-calib-result.schema.json',
    'python/ternforge/__main__.py',
    'python/ternforge/events.py',
    'python/ternforge/calib',
    'python/ternforge/sources/checkpoint.py',
    'python/ternforge/sources/hub_lock.py',
  ],
  schema: 'schemas/stages/fetch-calib.schema.json',
  tools: ['python'],
  network: true,
  pins: {
    requests: (p) => p.sources.filter((s) => s.kind === 'hub-files').map((s) => ({ name: s.name, kind: 'dataset', repo: s.dataset, ref: s.revision, files: [...(s.files ?? [])] })),
    resolve: resolveHubPins,
  },
  async run(ctx) {
    const result = await runWorkerCommand(ctx, 'fetch-calib', {
      sources: ctx.params.sources,
      cache_dir: ctx.params.cache_dir,
      model_dir: join(ctx.upstream('fetch-model'), 'model'),
      pins: ctx.pins,
      out: ctx.out,
    });
    if (!result.ok) return stageFailed(ctx.stage, result.error);
    const r = result.value;
    ctx.log(`fetch-calib: ${r.sources} sources, tokens by role ${JSON.stringify(r.tokens_by_role)}`);
    return ok({ summary: { sources: r.sources, tokens_by_role: r.tokens_by_role, manifest: r.manifest } });
  },
});
