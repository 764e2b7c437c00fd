/* Generated from schemas/eval-data.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * eval-data.json, written by fetch-eval (python/ternforge/sources/eval_data.py): the benchmarks' real splits it fetched at their locked commits, read by the eval stage (lib/eval/harness-data.ts).
 */
export interface EvalData {
  version: 1;
  sources: {
    name: string;
    /**
     * The benchmark whose format, prompt, scorer and normalisation this set follows (not a claim that its items come from it).
     */
    benchmark: 'gpqa-diamond' | 'mmlu-pro' | 'math-500' | 'livecodebench';
    dataset: string;
    commit: string;
    format: 'parquet' | 'json' | 'csv';
    role: 'evaluation';
    splits: {
      [k: string]: {
        path: string;
        sha256: string;
      }[];
    };
  }[];
}
