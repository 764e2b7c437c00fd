import { ok } from '../engine/result.ts';
import { defineStage } from '../engine/types.ts';
import type { PackParams } from '../schemas/generated/pack.ts';
import { stageFailed } from '../lib/failures.ts';
import { packInterchange } from '../lib/pack/pack-interchange.ts';

/** quantize's interchange -> weights/*.safetensors (2-bit codes, F32 scales, floats) + quantization_manifest.json. */
export const stage = defineStage<PackParams>({
  name: 'pack',
  summary: 'Pack ternary codes into 2-bit shards and write the quantization manifest',
  code: ['stages/pack.ts', 'lib/pack', 'lib/safetensors', 'schemas/interchange-index.schema.json', 'schemas/manifest.schema.json'],
  schema: 'schemas/stages/pack.schema.json',
  async run(ctx) {
    const result = await packInterchange(ctx.upstream('quantize'), ctx.out, {
      ...(ctx.params.shard_size_bytes === undefined ? {} : { shardBytes: ctx.params.shard_size_bytes }),
      ...(ctx.params.tie_word_embeddings === undefined ? {} : { tieWordEmbeddings: ctx.params.tie_word_embeddings }),
      log: (line) => ctx.log(line),
    });
    if (!result.ok) return stageFailed(ctx.stage, result.error);
    const s = result.value;
    ctx.log(`packed ${s.tensors} tensors (${s.ternary} ternary, ${s.float} float, ${s.exempt} exempt) into ${s.shards.length} shards, ${s.bytes} bytes`);
    return ok({ summary: { ...s } });
  },
});
