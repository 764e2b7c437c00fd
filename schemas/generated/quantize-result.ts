/* Generated from schemas/workers/quantize-result.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * The `result` event of `python -m ternforge quantize` (python/ternforge/quant/run.py result_of): the same figures whatever the method; stages/quantize.ts records them.
 */
export interface QuantizeResult {
  event: 'result';
  ok: true;
  method: string;
  /**
   * The interchange's safetensors files.
   *
   * @minItems 1
   */
  files: [string, ...string[]];
  /**
   * Tensor and parameter counts by kind.
   */
  totals: {
    [k: string]: number;
  };
  ternary_fraction_incl_embedding: number;
  /**
   * Of the gates' audited set (the allocation's figure).
   */
  ternary_fraction: number;
  /**
   * Only under quantize.launch with several ranks: the world, and each rank's seconds per phase (timings: volatile, never in the outputs).
   */
  distributed?: {
    world_size: number;
    backend: 'gloo' | 'nccl';
    /**
     * @minItems 2
     */
    ranks: [
      {
        rank: number;
        total_s: number;
        [k: string]: number;
      },
      {
        rank: number;
        total_s: number;
        [k: string]: number;
      },
      ...{
        rank: number;
        total_s: number;
        [k: string]: number;
      }[]
    ];
  };
}
