/* Generated from schemas/stages/fetch-calib.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * The profile section of the fetch-calib stage.
 */
export interface FetchCalibParams {}
