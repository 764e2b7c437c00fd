/* Generated from schemas/stages/emit.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * The profile section of the emit stage.
 */
export interface EmitParams {}
