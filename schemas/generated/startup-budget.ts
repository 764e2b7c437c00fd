/* Generated from schemas/startup-budget.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * evidence/startup-budget.json, written by emit (lib/submission/startup-budget.ts): each start-up phase of the submission from serve.sh's first line to /health 200, measured (a rate from bench/startup-rates.json times this submission's sizes) or estimated (with its source and arithmetic), against the 300 s limit.
 */
export interface StartupBudget {
  format: 'ternforge-startup-budget/1';
  /**
   * Seconds from start to /health 200 the grader allows.
   */
  limit_s: number;
  /**
   * Fraction of limit_s the total must leave unused.
   */
  required_spare: number;
  /**
   * The sizes of this submission the phases scale with.
   */
  facts: {
    /**
     * Wheels serve.sh installs (uv's own wheel excluded).
     */
    wheel_bytes: number;
    /**
     * Weight shards hashed against the manifest.
     */
    shard_bytes: number;
    /**
     * Weights stored as packed codes.
     */
    dequantized_weights: number;
    /**
     * The bf16 text-only checkpoint written for vLLM.
     */
    bf16_bytes: number;
    /**
     * vllm when the wheels carry vLLM.
     */
    engine: 'vllm' | 'builtin';
  };
  phases: {
    phase: string;
    seconds: number;
    /**
     * measured on the build machine, estimated from a cited source, or a reserve the server keeps back (schemas/contract.json).
     */
    basis: 'measured' | 'estimated' | 'reserve';
    /**
     * How the seconds follow from the facts and a measured rate, or from the cited source.
     */
    arithmetic: string;
  }[];
  total_s: number;
  spare_s: number;
  spare_fraction: number;
  /**
   * spare_fraction >= required_spare.
   */
  within: boolean;
  rates: {
    file: string;
    machine: {
      cpus: number;
      load_average_before: number[];
      load_average_after?: number[];
    };
  };
  notes: string[];
}
