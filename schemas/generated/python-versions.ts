/* Generated from schemas/workers/python-versions.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * The line the python-env stage's version probe prints from the new venv (stages/python-env.ts VERSIONS_SCRIPT).
 */
export interface PythonVersions {
  python: string;
  torch: string | null;
  transformers: string | null;
}
