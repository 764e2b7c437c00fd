import { ok } from '../engine/result.ts';
import { defineStage } from '../engine/types.ts';
import { stageFailed } from '../lib/failures.ts';
import { runWorkerCommand } from '../lib/worker-results.ts';
import type { FetchModelParams } from '../schemas/generated/fetch-model.ts';
import { resolveHubPins } from './hub-pins.ts';

/**
 * fetch-model: the source checkpoint in one layout for every profile.
 *   <out>/model/   config.json, generation_config.json, model.safetensors.index.json, model-0000K-of-0000N.safetensors,
 *                  tokenizer.json, tokenizer_config.json, chat_template.jinja (when not inside tokenizer_config.json)
 *   <out>/source.json   what was fetched, from where, every file's sha256 and size
 * A hub source (not `local_path`) is pinned: `revision` (a branch, tag or commit) is resolved once to its
 * commit and every file's hash, kept in profiles/<profile>.lock.json; the download reads that commit and
 * refuses bytes that differ (engine `pins` hook, stages/hub-pins.ts).
 * The work is the Python worker command `fetch-model` (python/ternforge/sources/); this file only maps the
 * profile section onto its config; lib/worker-results.ts checks what the worker reports.
 */
export const stage = defineStage<FetchModelParams>({
  name: 'fetch-model',
  summary: 'Fetch or generate the source checkpoint and check its hashes',
  code: [
    'stages/fetch-model.ts',
    'stages/hub-pins.ts',
    'lib/worker-results.ts',
    'schemas/workers/fetch-model-result.schema.json',
    'python/ternforge/__main__.py',
    'python/ternforge/events.py',
    'python/ternforge/sources',
  ],
  schema: 'schemas/stages/fetch-model.schema.json',
  tools: ['python', 'torch'],
  network: true,
  pins: {
    requests: (p) => (p.source === 'hub' && p.local_path === undefined ? [{ name: 'model', kind: 'model', repo: p.repo ?? '', ref: p.revision ?? '' }] : []),
    resolve: resolveHubPins,
  },
  async run(ctx) {
    const locked = ctx.pins['model'];
    const result = await runWorkerCommand(ctx, 'fetch-model', { ...ctx.params, out_dir: ctx.out, ...(locked !== undefined ? { locked } : {}) });
    if (!result.ok) return stageFailed(ctx.stage, result.error);
    const r = result.value;
    ctx.log(`fetch-model: ${ctx.params.source}: ${r.tensor_count} tensors, ${r.total_size} bytes`);
    return ok({ summary: { source: ctx.params.source, tensor_count: r.tensor_count, total_size: r.total_size, origin: r.origin } });
  },
});
