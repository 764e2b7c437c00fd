/* Generated from schemas/stages/vendor-wheels.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * The profile section of the vendor-wheels stage.
 */
export interface VendorWheelsParams {}
