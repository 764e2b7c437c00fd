import { join } from 'node:path';
import { ok } from '../engine/result.ts';
import { defineStage } from '../engine/types.ts';
import type { QuantizeParams } from '../schemas/generated/quantize.ts';
import { stageFailed } from '../lib/failures.ts';
import { launchKey, rankFailure, torchrunArgs, worldSize } from '../lib/torchrun.ts';
import { runWorkerCommand } from '../lib/worker-results.ts';

/**
 * quantize: the fetched checkpoint to the quantize -> pack interchange (DESIGN.md section 2):
 *   <out>/index.json, <out>/interchange-0000K-of-0000N.safetensors, <out>/quantize_report.json
 * The work is the Python worker command `quantize` (python/ternforge/quant/): every method (`absmean`,
 * `none`, `twn`, `gptq`, `gptq+kd`) behind one protocol, one float-budget plan and one streaming writer;
 * the calibrated ones (`twn`'s float budget, `gptq`, `gptq+kd`) read fetch-calib's calibration tokens.
 * With `launch` of several processes the worker runs under torchrun (lib/torchrun.ts); the key holds only
 * what of it changes the computation (launchKey), and the evidence record the world and each rank's seconds.
 */
/** What the evidence record holds for every method (schemas/workers/quantize-result.schema.json requires each). */
export const FIGURES = ['files', 'totals', 'ternary_fraction_incl_embedding', 'ternary_fraction'] as const;

export const stage = defineStage<QuantizeParams>({
  name: 'quantize',
  summary: 'Quantize the checkpoint to ternary codes and scales (interchange format)',
  code: [
    'stages/quantize.ts',
    'lib/worker-results.ts',
    'lib/torchrun.ts',
    'schemas/workers/quantize-result.schema.json',
    'python/ternforge/__main__.py',
    'python/ternforge/events.py',
    'python/ternforge/quant',
    'python/ternforge/sources/checkpoint.py',
    'python/ternforge/calib/tokens.py',
    'python/ternforge_server/loader.py',
    'python/ternforge_server/packing.py',
  ],
  schema: 'schemas/stages/quantize.schema.json',
  tools: ['python', 'torch'],
  keyParams(params) {
    const { launch, ...rest } = params;
    const key = launchKey(params.method, launch, params.kd?.micro_batch);
    return key === undefined ? rest : { ...rest, launch: key };
  },
  async run(ctx) {
    const fetched = ctx.upstream('fetch-model');
    const size = worldSize(ctx.params.launch);
    const launcher = size > 1 && ctx.params.launch !== undefined ? torchrunArgs(ctx.params.launch, ctx.key.slice(0, 16)) : [];
    if (launcher.length > 0) ctx.log(`quantize: ${size} processes under torchrun: ${ctx.python} ${launcher.join(' ')} -m ternforge quantize`);
    const result = await runWorkerCommand(ctx, 'quantize', {
      ...ctx.params,
      model_dir: join(fetched, 'model'),
      source_json: join(fetched, 'source.json'),
      calib_dir: ctx.upstream('fetch-calib'),
      // Distillation checkpoints outlive the temp output dir (an interrupted run resumes), keyed by the
      // stage key so a run with other inputs never resumes from them.
      work_dir: join(ctx.workdir, '.ternforge', ctx.profile, 'quantize-work', ctx.key.slice(0, 16)),
      out_dir: ctx.out,
    }, launcher);
    if (!result.ok) return stageFailed(ctx.stage, size > 1 ? rankFailure(result.error, 'quantize', size) : result.error);
    const r = result.value;
    return ok({
      summary: {
        method: ctx.params.method,
        group_size: ctx.params.group_size,
        files: r.files,
        totals: r.totals,
        ternary_fraction_incl_embedding: r.ternary_fraction_incl_embedding,
        ternary_fraction: r.ternary_fraction,
        ...(r.distributed === undefined ? {} : { distributed: r.distributed }),
      },
    });
  },
});
