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
}
