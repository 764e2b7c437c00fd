/* Generated from schemas/stages/report.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * The profile section of the report stage. The report has no tunable behaviour: what it shows is decided by the evidence, and what it refuses by the contract. Kept as an object so a later option can be added without touching every profile.
 */
export interface ReportParams {}
