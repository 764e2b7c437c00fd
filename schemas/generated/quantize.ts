/* Generated from schemas/stages/quantize.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * The profile section of the quantize stage.
 */
export interface QuantizeParams {}
