/* Generated from schemas/workers/kernels-record.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * Which Gated DeltaNet kernels transformers selects in a workers' environment (python/ternforge/kernels.py probe()): recorded by python-env in ternforge-env.json and checked by the preflight.
 */
export interface KernelsRecord {
  /**
   * Installed version of each kernel distribution (and triton, their compiler), null when absent.
   */
  distributions: {
    [k: string]: string | null;
  };
  /**
   * Function of a Gated DeltaNet layer -> the module of the implementation transformers chose at import ('torch' for its own PyTorch code).
   */
  selected: {
    chunk_gated_delta_rule: string;
    fused_recurrent_gated_delta_rule: string;
    causal_conv1d_fn: string;
    causal_conv1d_update: string;
  };
  /**
   * Both delta rules are flash-linear-attention's.
   */
  fast_path: boolean;
}
