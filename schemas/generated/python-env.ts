/* Generated from schemas/stages/python-env.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * The profile section of the python-env stage.
 */
export interface PythonEnvParams {
  /**
   * Repository-relative path of the pinned requirements file installed into the venv (default python/requirements.txt).
   */
  requirements?: string;
}
