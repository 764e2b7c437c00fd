import { access } from 'node:fs/promises';
import { join } from 'node:path';
import { err, ok } from '../engine/result.ts';
import { defineStage } from '../engine/types.ts';
import type { QualityParams } from '../schemas/generated/quality.ts';
import { stageFailed } from '../lib/failures.ts';
import { runWorkerCommand } from '../lib/worker-results.ts';

/**
 * quality: how far the packed model is from full precision, measured on held-out text.
 *   <out>/quality.json   perplexity of both models and their ratio, top-1 next-token agreement, KL,
 *                        per-tensor relative Frobenius error and share of zero codes
 * The packed model is pack's output (quantization_manifest.json + weights/) loaded by the server's own
 * loader (ternforge_server.loader.load_model); the worker links pack's files and fetch-model's config and
 * tokenizer files into a temporary submission-shaped directory, so the loader reads pack's bytes as they
 * are. The reference is fetch-model's `model/`; the text is fetch-calib's `heldout` role only.
 */
export const stage = defineStage<QualityParams>({
  name: 'quality',
  summary: 'Measure held-out perplexity and agreement from the packed shards',
  code: [
    'stages/quality.ts',
    'lib/worker-results.ts',
    'schemas/workers/quality-result.schema.json',
    'python/ternforge/__main__.py',
    'python/ternforge/events.py',
    'python/ternforge/quality.py',
    'python/ternforge/calib/tokens.py',
    'python/ternforge/quant/model.py',
    'python/ternforge_server/loader.py',
    'python/ternforge_server/packing.py',
  ],
  schema: 'schemas/stages/quality.schema.json',
  tools: ['python', 'torch'],
  async run(ctx) {
    const packed = ctx.upstream('pack');
    const manifest = join(packed, 'quantization_manifest.json');
    try {
      await access(manifest);
    } catch {
      return err({ reason: 'missing-input', stage: ctx.stage, path: manifest });
    }
    const result = await runWorkerCommand(ctx, 'quality', {
      ...ctx.params,
      pack_dir: packed,
      model_dir: join(ctx.upstream('fetch-model'), 'model'),
      calib_dir: ctx.upstream('fetch-calib'),
      out: ctx.out,
    });
    if (!result.ok) return stageFailed(ctx.stage, result.error);
    const r = result.value;
    ctx.log(`quality: ppl ${r.ppl} vs ${r.ppl_reference} (ratio ${r.ppl_ratio}), top-1 agreement ${r.top1_agreement}`);
    return ok({
      summary: { ppl: r.ppl, ppl_reference: r.ppl_reference, ppl_ratio: r.ppl_ratio, top1_agreement: r.top1_agreement, kl: r.kl },
    });
  },
});
