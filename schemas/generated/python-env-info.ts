/* Generated from schemas/engine/python-env-info.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * <venv>/ternforge-env.json, written last by the python-env stage: which key built the venv and the tool versions that enter the keys of stages declaring python or torch.
 */
export interface PythonEnvInfo {
  schema: 1;
  /**
   * The python-env stage key this venv was built for: equal means nothing to do.
   */
  key: string;
  /**
   * The venv interpreter's version (platform.python_version()).
   */
  python: string;
  /**
   * Installed torch version, null when absent.
   */
  torch: string | null;
  /**
   * Installed transformers version, null when absent.
   */
  transformers: string | null;
  /**
   * sha256 of the requirements file installed.
   */
  requirements: string;
  /**
   * The Gated DeltaNet kernels transformers selects in the venv; null where torch or transformers is absent.
   */
  kernels: KernelsRecord | null;
}
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
