/* Generated from schemas/stages/report.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * The profile section of the report stage.
 */
export interface ReportParams {}
