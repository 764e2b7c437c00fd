/* Generated from schemas/stages/quantize.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * The profile section of the quantize stage: the method and group size of the ternary codes.
 */
export interface QuantizeParams {
  /**
   * A key of python/ternforge/quant/methods.py METHODS (absmean; later twn, gptq, gptq+kd).
   */
  method: string;
  /**
   * Consecutive weights along `in` sharing one F32 scale; must divide every ternary row length.
   */
  group_size: number;
  /**
   * Regular expressions of tensor names kept in float (besides the fixed small tensors).
   */
  keep_float?: string[];
  /**
   * Size cap of each interchange safetensors file.
   */
  max_file_bytes?: number;
}
