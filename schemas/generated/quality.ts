/* Generated from schemas/stages/quality.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * The profile section of the quality stage.
 */
export interface QualityParams {}
