/* Generated from schemas/stages/fetch-eval.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * The profile section of the fetch-eval stage: the graded benchmarks' real splits, hub dataset files at a pinned revision, each with the role `evaluation` (the only role benchmark data may have). Only the eval stage reads them. `{}` (no sources): the eval stage asks the project-written sets of data/eval/ instead.
 */
export interface FetchEvalParams {
  sources?: EvalSource[];
  /**
   * Download cache (default: huggingface_hub's).
   */
  cache_dir?: string;
}
export interface EvalSource {
  name: string;
  /**
   * The benchmark whose format, prompt, scorer and normalisation this set follows (not a claim that its items come from it).
   */
  benchmark: 'gpqa-diamond' | 'mmlu-pro' | 'math-500' | 'livecodebench';
  /**
   * The dataset repository id (e.g. HuggingFaceH4/MATH-500).
   */
  dataset: string;
  /**
   * Branch, tag or commit; resolved once to a commit and file hashes in profiles/<profile>.lock.json.
   */
  revision: string;
  role: 'evaluation';
  /**
   * How `datasets` reads the files (json: JSON lines).
   */
  format: 'parquet' | 'json' | 'csv';
  /**
   * Split name (as the benchmark's lm-eval task reads it) -> the repository files that hold it.
   */
  splits: {
    /**
     * @minItems 1
     */
    [k: string]: [string, ...string[]];
  };
  /**
   * The dataset needs an accepted licence and HF_TOKEN (GPQA); the preflight checks the token.
   */
  gated?: boolean;
}
