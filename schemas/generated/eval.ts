/* Generated from schemas/stages/eval.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * The profile section of the eval stage.
 */
export interface EvalParams {}
