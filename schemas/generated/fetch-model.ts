/* Generated from schemas/stages/fetch-model.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * The profile section of the fetch-model stage.
 */
export interface FetchModelParams {}
