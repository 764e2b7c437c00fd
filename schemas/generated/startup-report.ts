/* Generated from schemas/startup-report.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * startup-report.json, written by the server (python/ternforge_server, --startup-report) and shipped as evidence/smoke/startup-report.json: what it loaded, skipped as exempt and verified at start-up. The fields the report reads are required; the server may add more.
 */
export interface StartupReport {
  /**
   * Every tensor the server loaded.
   */
  loaded: {
    name: string;
  }[];
  /**
   * Exempt tensors (vision tower, MTP) left unloaded.
   */
  skipped_exempt: string[];
  /**
   * Every shard, with the sha256 the server computed before loading it.
   */
  shards: {
    file: string;
    sha256: string;
    size?: number;
  }[];
}
