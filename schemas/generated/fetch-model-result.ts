/* Generated from schemas/workers/fetch-model-result.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * The `result` event of `python -m ternforge fetch-model` (python/ternforge/sources/fetch.py) when it wrote the checkpoint.
 */
export interface FetchModelResult {
  event: 'result';
  ok: true;
  /**
   * Tensors in the written checkpoint.
   */
  tensor_count: number;
  /**
   * Bytes of its safetensors files.
   */
  total_size: number;
  /**
   * Where the checkpoint came from (hub commit, generator and seed), as source.json records it.
   */
  origin: {};
}
