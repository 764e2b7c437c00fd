/* Generated from schemas/stages/audit.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * The profile section of the audit stage.
 */
export interface AuditParams {}
