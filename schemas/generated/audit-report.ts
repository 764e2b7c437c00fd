/* Generated from schemas/audit-report.schema.json by scripts/gen-types.ts. Do not edit. */

export type GateName = 'ternary-fraction' | 'stored-parameters' | 'weight-audit';
/**
 * Why a finding was made. The manifest: unreadable, invalid. A shard: listed twice, in weights/ but unlisted, outside weights/, missing, not strict safetensors, of another size or sha256; a packed byte holding the invalid code 3. A tensor entry: exempt by flag but not by name, in an unlisted shard, a key missing, shared, absent from its shard or not its own; a packed entry not 2-D or with a bad group size; codes, scales or a float tensor of another stored shape/dtype; a stored tensor no entry uses. Values: a scale not finite, not positive or above the maximum; a float tensor not finite. Against the source: a text tensor absent from the manifest, of another shape or dtype, a tied head the manifest does not record. Gates 1 and 2 from the counted figures.
 */
export type ViolationReason =
  | 'manifest-unreadable'
  | 'manifest-invalid'
  | 'duplicate-shard'
  | 'unlisted-shard'
  | 'shard-path-outside-weights'
  | 'shard-missing'
  | 'shard-invalid'
  | 'shard-size-mismatch'
  | 'shard-sha256-mismatch'
  | 'invalid-code'
  | 'false-exemption'
  | 'unknown-shard'
  | 'missing-key'
  | 'key-shared'
  | 'key-not-in-shard'
  | 'key-not-own'
  | 'packed-not-2d'
  | 'invalid-group-size'
  | 'codes-shape-mismatch'
  | 'scale-shape-mismatch'
  | 'float-mismatch'
  | 'unreferenced-stored-tensor'
  | 'scale-not-finite'
  | 'scale-not-positive'
  | 'scale-out-of-range'
  | 'float-not-finite'
  | 'tensor-not-in-manifest'
  | 'source-shape-mismatch'
  | 'source-dtype-mismatch'
  | 'tied-head-unrecorded'
  | 'ternary-fraction-too-low'
  | 'stored-ratio-too-high';

/**
 * audit.json, written by the audit stage (lib/audit/audit.ts) and shipped as evidence/audit.json: gates 1-3 recomputed from the stored bytes, every violation found, each shard and each tensor as audited.
 */
export interface AuditReport {
  format: 'ternforge-audit/1';
  pass: boolean;
  failed_gates: GateName[];
  thresholds: {
    ternary_fraction_min: number;
    stored_ratio_max: number;
  };
  /**
   * `checked` against the source's own tensor list, or `skipped` (no source given).
   */
  source_coverage: 'checked' | 'skipped';
  /**
   * Where the source's tensor list came from (its place in the graph).
   */
  source: string | null;
  gates: {
    'ternary-fraction': {
      pass: boolean;
      value: number;
      threshold: number;
      margin: number;
    };
    'stored-parameters': {
      pass: boolean;
      stored: number;
      original: number;
      ratio: number;
      threshold: number;
      margin: number;
    };
    'weight-audit': {
      pass: boolean;
      violations: number;
    };
  };
  counts: {
    tensors: number;
    original: number;
    codes: number;
    scales: number;
    floats: number;
    stored: number;
    ternary_fraction: number;
    stored_ratio: number;
    ternary_fraction_pass: boolean;
    stored_ratio_pass: boolean;
    /**
     * ternary_fraction minus the gate's floor (positive: room left).
     */
    ternary_fraction_margin: number;
    /**
     * The gate's ceiling minus stored_ratio (positive: room left).
     */
    stored_ratio_margin: number;
    /**
     * Float elements that could still be added before gate 1 fails (negative: how many too many).
     */
    float_headroom: number;
    manifest_tensors: number;
    exempt_tensors: number;
    /**
     * Embedding and head: outside the gates' audited set.
     */
    excluded: string[];
    source_text_tensors: number | null;
  };
  shards: ShardRow[];
  violations: Violation[];
  tensors: TensorRow[];
}
export interface ShardRow {
  file: string;
  size: number;
  sha256: string | null;
  size_ok: boolean;
  sha256_ok: boolean;
  code_bytes_scanned: number;
}
/**
 * One finding; each names the gate it violates.
 */
export interface Violation {
  gate: GateName;
  reason: ViolationReason;
  tensor?: string;
  shard?: string;
  expected?: string | number;
  actual?: string | number;
  detail?: string;
}
export interface TensorRow {
  name: string;
  encoding: string;
  shape: number[];
  /**
   * In the gates' audited set.
   */
  audited: boolean;
  in_source: boolean;
  original: number;
  codes: number;
  scales: number;
  floats: number;
}
