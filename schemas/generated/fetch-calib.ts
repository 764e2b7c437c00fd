/* Generated from schemas/stages/fetch-calib.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * The profile section of the fetch-calib stage: the declared text sources, each with its role. Benchmark data and validation/test/dev splits may only have the role `evaluation` (refused otherwise, before anything is read).
 */
export interface FetchCalibParams {
  /**
   * Every text the pipeline reads, in order. Two entries over one text split it by document through disjoint `buckets`.
   *
   * @minItems 1
   */
  sources: [CalibSource, ...CalibSource[]];
  /**
   * hub-files: download cache (default: huggingface_hub's).
   */
  cache_dir?: string;
}
export interface CalibSource {
  /**
   * Unique; names the token file tokens/<role>/<name>.safetensors.
   */
  name: string;
  /**
   * package-text: prose shipped inside installed packages (no network); hub-files: dataset files at a pinned hub revision.
   */
  kind: 'package-text' | 'hub-files';
  /**
   * package-text: pydoc-topics | stdlib-docstrings; hub-files: the dataset repository id.
   */
  dataset: string;
  /**
   * The dataset's configuration (subset), if any; checked against the benchmark deny-list too.
   */
  config?: string | null;
  /**
   * Only `train`-like splits may have a role other than evaluation.
   */
  split: string;
  /**
   * hub-files: the branch, tag or commit; the first fetch (or `tsx pipeline.ts lock`) resolves it to a commit and the files' sha256, kept in profiles/<profile>.lock.json. package-text: python-<major>.<minor> whose files are read.
   */
  revision: string;
  /**
   * calibration fits weights; heldout measures perplexity; selection chooses defaults; evaluation only scores.
   */
  role: 'calibration' | 'heldout' | 'selection' | 'evaluation';
  /**
   * At most this many documents (rows) are taken, in the source's stable order.
   */
  rows: number;
  /**
   * [lo, hi): documents whose sha256 bucket (of 100) lies in this range; default [0, 100].
   *
   * @minItems 2
   * @maxItems 2
   */
  buckets?: [number, number];
  /**
   * hub-files: repository-relative data files (.jsonl, .json, .parquet).
   */
  files?: string[];
  /**
   * hub-files: how a row becomes text; messages/sharegpt rows go through the tokenizer's chat template.
   */
  format?: 'text' | 'fields' | 'messages' | 'sharegpt';
  /**
   * hub-files: the row fields read (the messages field first for messages/sharegpt).
   */
  fields?: string[];
  /**
   * Stop after this many tokens from this source.
   */
  max_tokens?: number;
}
