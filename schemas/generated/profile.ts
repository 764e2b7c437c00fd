/* Generated from schemas/profile.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * A build profile: one section per stage; a stage's key hashes only its own section.
 */
export interface Profile {
  $schema?: string;
  /**
   * Equal to the file name profiles/<name>.json.
   */
  name: string;
  description: string;
  stages: {
    'python-env': PythonEnvParams;
    'fetch-model': FetchModelParams;
    'fetch-calib': FetchCalibParams;
    quantize: QuantizeParams;
    pack: PackParams;
    quality: QualityParams;
    audit: AuditParams;
    'vendor-wheels': VendorWheelsParams;
    emit: EmitParams;
    'smoke-serve': SmokeServeParams;
    eval: EvalParams;
    report: ReportParams;
  };
}
/**
 * The profile section of the python-env stage.
 */
export interface PythonEnvParams {}
/**
 * The profile section of the fetch-model stage.
 */
export interface FetchModelParams {}
/**
 * The profile section of the fetch-calib stage.
 */
export interface FetchCalibParams {}
/**
 * The profile section of the quantize stage.
 */
export interface QuantizeParams {}
/**
 * The profile section of the pack stage.
 */
export interface PackParams {}
/**
 * The profile section of the quality stage.
 */
export interface QualityParams {}
/**
 * The profile section of the audit stage.
 */
export interface AuditParams {}
/**
 * The profile section of the vendor-wheels stage.
 */
export interface VendorWheelsParams {}
/**
 * The profile section of the emit stage.
 */
export interface EmitParams {}
/**
 * The profile section of the smoke-serve stage.
 */
export interface SmokeServeParams {}
/**
 * The profile section of the eval stage.
 */
export interface EvalParams {}
/**
 * The profile section of the report stage.
 */
export interface ReportParams {}
