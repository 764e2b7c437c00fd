/**
 * emit: the self-contained submission directory, exactly the contract's files (lib/submission/layout.ts):
 * serve.sh and the server code (copied from the repository), the locked requirements and wheels/
 * (vendor-wheels), the manifest and weights/ (pack), config, tokenizer and chat template (fetch-model's
 * model/, never its float weights), architecture.json (written here), and evidence/ (audit, source,
 * wheels records, and the start-up budget computed here). Upstream files are hard-linked, not copied.
 *
 * The report stage adds the evidence guide to this tree; the engine publishes report's outputs as a
 * hard-link tree at `<workdir>/dist/<profile>/` (pipeline.ts `publish`).
 */
import { join } from 'node:path';
import { SchemaSet } from '../engine/json-io.ts';
import { ok } from '../engine/result.ts';
import { stageFailed } from '../lib/failures.ts';
import { defineStage } from '../engine/types.ts';
import { loadSourceCheckpoint } from '../lib/audit/source.ts';
import { assembleSubmission } from '../lib/submission/assemble.ts';
import type { EmitParams } from '../schemas/generated/emit.ts';

export const stage = defineStage<EmitParams>({
  name: 'emit',
  summary: 'Assemble the self-contained submission directory (published with the evidence at dist/<profile>/)',
  code: ['stages/emit.ts', 'lib/audit/source.ts', 'lib/submission/assemble.ts', 'lib/submission/architecture.ts', 'lib/submission/layout.ts', 'lib/submission/startup-budget.ts', 'bench/startup-rates.json', 'schemas/architecture.schema.json', 'schemas/startup-budget.schema.json', 'schemas/wheels-record.schema.json', 'serve/serve.sh', 'python/ternforge_server'],
  schema: 'schemas/stages/emit.schema.json',
  tools: ['node'],
  async run(ctx) {
    const schemas = new SchemaSet(join(ctx.root, 'schemas'));
    const t0 = performance.now();
    // The source's tensor list (headers only) goes into architecture.json: verify checks coverage from it.
    const source = await loadSourceCheckpoint(join(ctx.upstream('fetch-model'), 'model'));
    if (!source.ok) return stageFailed(ctx.stage, source.error);
    const sourceTensors = Object.fromEntries(source.value.tensors.map((t) => [t.name, { shape: [...t.shape], dtype: t.dtype }]));
    const built = assembleSubmission({ root: ctx.root, upstream: (s) => ctx.upstream(s), sourceTensors, ...(ctx.params.sampling_defaults ? { sampling: ctx.params.sampling_defaults } : {}) }, ctx.out, schemas);
    if (!built.ok) return stageFailed(ctx.stage, built.error);
    const { stats, files, budget } = built.value;
    ctx.log(`start-up budget (${budget.facts.engine}): ${budget.total_s} s of ${budget.limit_s} s, ${(budget.spare_fraction * 100).toFixed(0)}% to spare${budget.within ? '' : ` (WARNING: under the ${budget.required_spare * 100}% required)`}: evidence/startup-budget.md`);
    ctx.log(`assembled ${stats.files} files (${(stats.bytes / 2 ** 20).toFixed(1)} MiB): ${stats.linked} hard-linked (${(stats.linkedBytes / 2 ** 20).toFixed(1)} MiB), ${stats.copied} copied, ${stats.written} written, in ${((performance.now() - t0) / 1000).toFixed(2)} s`);
    const summary: Record<string, unknown> = { ...stats, startup_budget: { engine: budget.facts.engine, total_s: budget.total_s, spare_fraction: budget.spare_fraction, within: budget.within }, top_level: [...new Set(files.map((f) => f.split('/')[0]))] };
    return ok({ summary });
  },
});
