/* Generated from schemas/interchange-index.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * index.json written by quantize beside its safetensors files; the only thing pack reads. For a ternary tensor <name>: an I8 tensor <name> [out, in] with values in {-1,0,1} and an F32 tensor <name>.scale [out, in/group_size]. For a float tensor: its data under its source name and source dtype.
 */
export interface InterchangeIndex {
  /**
   * Version of this layout; pack refuses any other.
   */
  format: 'ternforge-interchange/1';
  /**
   * Source checkpoint id (hub repo or generated model name).
   */
  base_model: string;
  /**
   * Pinned source revision (commit hash, or the generator's seed/version for tiny).
   */
  revision: string;
  /**
   * Quantization method that produced the codes (absmean, twn, gptq, gptq+kd, none).
   */
  method: string;
  /**
   * Safetensors files of this interchange, relative to index.json.
   *
   * @minItems 1
   */
  files: [string, ...string[]];
  /**
   * Every tensor of the source checkpoint, by source name.
   */
  tensors: {
    [k: string]: InterchangeTensor;
  };
}
export interface InterchangeTensor {
  /**
   * ternary: I8 codes plus <name>.scale; float: source data.
   */
  encoding: 'ternary' | 'float';
  /**
   * Which file of `files` holds it.
   */
  file: string;
  /**
   * Source shape.
   */
  shape: number[];
  /**
   * Source dtype (BF16, F16, F32) that float tensors keep.
   */
  dtype: string;
  /**
   * Consecutive weights along `in` sharing one scale (ternary only).
   */
  group_size?: number;
  /**
   * Vision tower or MTP head: stored for completeness, never served.
   */
  exempt?: boolean;
}
