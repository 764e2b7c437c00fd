/* Generated from schemas/quantize-report.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * quantize_report.json, written by the quantize worker (python/ternforge/quant/) and shipped as evidence/quantize_report.json: the method, the allocation and per-tensor facts. The fields the report reads are described; the worker adds method-specific ones.
 */
export interface QuantizeReport {
  method: string;
  group_size: number;
  /**
   * Tensor name -> how it was stored and, for ternary ones, its error and share of zero codes.
   */
  tensors: {
    [k: string]: {
      encoding: string;
      rel_error?: number;
      zero_fraction?: number;
    };
  };
}
