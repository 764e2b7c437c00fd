/* Generated from schemas/stages/python-env.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * The profile section of the python-env stage.
 */
export interface PythonEnvParams {}
