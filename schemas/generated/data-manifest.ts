/* Generated from schemas/data-manifest.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * data_manifest.json written by fetch-calib: every text the pipeline read, its role, and the token file made from it. The reviewer checks from it that no benchmark data or validation/test split fitted or selected anything.
 */
export interface DataManifest {
  format: 'ternforge-data/1';
  tokenizer: {
    /**
     * Separator consumers put between documents.
     */
    eos_id: number | null;
    vocab_size: number;
    /**
     * sha256 of each tokenizer file of fetch-model's model/.
     */
    files: {
      [k: string]: string;
    };
  };
  rules: {
    /**
     * Benchmark families on the deny-list.
     */
    benchmark_patterns: string[];
    /**
     * The split-name pattern that only `evaluation` may use.
     */
    held_splits: string;
    statement: string;
  };
  sources: {
    name: string;
    kind: 'package-text' | 'hub-files';
    dataset: string;
    config: string | null;
    split: string;
    /**
     * The ref the profile asks for (hub-files) or the Python version (package-text).
     */
    revision: string;
    /**
     * hub-files: the commit the lock resolved `revision` to, which was read.
     */
    commit?: string;
    role: 'calibration' | 'heldout' | 'selection' | 'evaluation';
    rows_declared: number;
    buckets: number[];
    /**
     * Documents taken.
     */
    documents: number;
    tokens: number;
    /**
     * sha256 over every taken document's id and text.
     */
    text_sha256: string;
    /**
     * The taken documents (null past 2000; see document_ids_sha256).
     */
    document_ids: string[] | null;
    document_ids_sha256: string;
    file: string;
    sha256: string;
    bytes: number;
  }[];
}
