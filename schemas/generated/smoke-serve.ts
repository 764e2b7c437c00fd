/* Generated from schemas/stages/smoke-serve.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * The profile section of the smoke-serve stage.
 */
export interface SmokeServeParams {}
