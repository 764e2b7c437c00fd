/* Generated from schemas/workers/harness-result.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * The `result` event of `python -m ternforge harness` (python/ternforge/harness.py): where lm-eval wrote its output files, and how each benchmark is read back from them.
 */
export interface HarnessResult {
  event: 'result';
  /**
   * The installed lm-eval version.
   */
  lm_eval: string;
  math_verify: string;
  /**
   * The `python -m lm_eval run ...` command line, as run.
   */
  argv: string[];
  /**
   * lm-eval's results_<time>.json (absolute).
   */
  results: string;
  benchmarks: {
    /**
     * The benchmark whose format, prompt, scorer and normalisation this set follows (not a claim that its items come from it).
     */
    benchmark: 'gpqa-diamond' | 'mmlu-pro' | 'math-500' | 'livecodebench';
    /**
     * The task (or group) lm-eval ran for the benchmark.
     */
    task: string;
    /**
     * Its leaf tasks, one samples file each.
     *
     * @minItems 1
     */
    tasks: [string, ...string[]];
    /**
     * The lm-eval task it includes (null: our own task, harness_tasks/).
     */
    reference_task: string | null;
    /**
     * The filter whose samples hold the scored answer.
     */
    filter: string;
    /**
     * The per-sample metric that is the answer's score (0 or 1).
     */
    metric: string;
    /**
     * Leaf task -> samples_<task>_<time>.jsonl (absolute).
     */
    samples: {
      [k: string]: string;
    };
  }[];
}
