import { join } from 'node:path';
import { ok } from '../engine/result.ts';
import { defineStage } from '../engine/types.ts';
import type { QuantizeParams } from '../schemas/generated/quantize.ts';
import { stageFailed } from '../lib/failures.ts';
import { runWorkerCommand } from '../lib/worker-results.ts';

/**
 * quantize: the fetched checkpoint to the quantize -> pack interchange (DESIGN.md section 2):
 *   <out>/index.json, <out>/interchange-0000K-of-0000N.safetensors, <out>/quantize_report.json
 * The work is the Python worker command `quantize` (python/ternforge/quant/): every method (`absmean`,
 * `none`, `twn`, `gptq`, `gptq+kd`) behind one protocol, one float-budget plan and one streaming writer;
 * the calibrated ones (`twn`'s float budget, `gptq`, `gptq+kd`) read fetch-calib's calibration tokens.
 */
/** What the evidence record holds for every method (schemas/workers/quantize-result.schema.json requires each). */
export const FIGURES = ['files', 'totals', 'ternary_fraction_incl_embedding', 'ternary_fraction'] as const;

export const stage = defineStage<QuantizeParams>({
  name: 'quantize',
  summary: 'Quantize the checkpoint to ternary codes and scales (interchange format)',
  code: [
    'stages/quantize.ts',
    'lib/worker-results.ts',
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
  async run(ctx) {
    const fetched = ctx.upstream('fetch-model');
    const result = await runWorkerCommand(ctx, 'quantize', {
      ...ctx.params,
      model_dir: join(fetched, 'model'),
      source_json: join(fetched, 'source.json'),
      calib_dir: ctx.upstream('fetch-calib'),
      // Distillation checkpoints outlive the temp output dir (an interrupted run resumes), keyed by the
      // stage key so a run with other inputs never resumes from them.
      work_dir: join(ctx.workdir, '.ternforge', ctx.profile, 'quantize-work', ctx.key.slice(0, 16)),
      out_dir: ctx.out,
    });
    if (!result.ok) return stageFailed(ctx.stage, result.error);
    const r = result.value;
    return ok({
      summary: {
        method: ctx.params.method,
        group_size: ctx.params.group_size,
        files: r.files,
        totals: r.totals,
        ternary_fraction_incl_embedding: r.ternary_fraction_incl_embedding,
        ternary_fraction: r.ternary_fraction,
      },
    });
  },
});
