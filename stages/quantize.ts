import { join } from 'node:path';
import { err, ok } from '../engine/result.ts';
import { defineStage } from '../engine/types.ts';
import type { QuantizeParams } from '../schemas/generated/quantize.ts';
import { failureEvent } from './fetch-model.ts';

/**
 * quantize: the fetched checkpoint to the quantize -> pack interchange (DESIGN.md section 2):
 *   <out>/index.json, <out>/interchange-0000K-of-0000N.safetensors, <out>/quantize_report.json
 * The work is the Python worker command `quantize` (python/ternforge/quant/): every method (`absmean`,
 * `none`, `twn`, `gptq`, `gptq+kd`) behind one protocol, one float-budget plan and one streaming writer;
 * the calibrated ones (`twn`'s float budget, `gptq`, `gptq+kd`) read fetch-calib's calibration tokens.
 */
/** What the evidence record holds for every method. */
export const FIGURES = ['files', 'totals', 'ternary_fraction_incl_embedding', 'ternary_fraction'] as const;

export const stage = defineStage<QuantizeParams>({
  name: 'quantize',
  summary: 'Quantize the checkpoint to ternary codes and scales (interchange format)',
  code: [
    'stages/quantize.ts',
    'stages/fetch-model.ts',
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
    const result = await ctx.worker('quantize', {
      ...ctx.params,
      model_dir: join(fetched, 'model'),
      source_json: join(fetched, 'source.json'),
      calib_dir: ctx.upstream('fetch-calib'),
      // Distillation checkpoints outlive the temp output dir (an interrupted run resumes), keyed by the
      // stage key so a run with other inputs never resumes from them.
      work_dir: join(ctx.workdir, '.ternforge', ctx.profile, 'quantize-work', ctx.key.slice(0, 16)),
      out_dir: ctx.out,
    });
    if (!result.ok) return result;
    const failure = failureEvent(result.value);
    if (failure) return err({ reason: 'stage-failed', stage: ctx.stage, detail: failure.detail, facts: failure.facts });
    const final = result.value.find((e) => e.event === 'result');
    // Every method's result carries the same figures (python/ternforge/quant/run.py result_of); a result
    // without them is a worker bug, not a build to record.
    const missing = FIGURES.filter((k) => final?.[k] === undefined);
    if (missing.length > 0) {
      return err({ reason: 'stage-failed', stage: ctx.stage, detail: `the quantize worker's result lacks ${missing.join(', ')}`, facts: { missing } });
    }
    return ok({
      summary: {
        method: ctx.params.method,
        group_size: ctx.params.group_size,
        files: final?.['files'],
        totals: final?.['totals'],
        ternary_fraction_incl_embedding: final?.['ternary_fraction_incl_embedding'],
        ternary_fraction: final?.['ternary_fraction'],
      },
    });
  },
});
