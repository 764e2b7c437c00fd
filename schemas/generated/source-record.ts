/* Generated from schemas/source-record.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * source.json, written by fetch-model (python/ternforge/sources/) and shipped as evidence/source.json: what was fetched or generated, from where, and every file's sha256 and size. The fields the report reads are required; the writer may add more.
 */
export interface SourceRecord {
  format: 'ternforge-source/1';
  /**
   * Where the checkpoint came from: a hub repository at a commit, or a generator and its seed.
   */
  origin: {
    kind: string;
    base_model: string;
    revision: string;
  };
  files: {
    path: string;
    sha256: string;
    size: number;
  }[];
}
