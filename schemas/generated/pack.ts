/* Generated from schemas/stages/pack.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * The profile section of the pack stage.
 */
export interface PackParams {}
