/* Generated from schemas/stages/eval.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * The profile section of the eval stage. Every field has a default (the grader's settings), so `{}` is valid.
 */
export interface EvalParams {
  /**
   * Question set files (repository-relative), each declaring its role; default: every file in data/eval/.
   */
  sets?: string[];
  /**
   * Answer retention: the open-answer set asked of the submission and of the full-precision model (fetch-model's checkpoint served by the same server), scored per kind (lib/eval/answers.ts). Always run.
   */
  answers?: {
    /**
     * Answer set file (repository-relative, schemas/answer-set.schema.json); default data/answers/everyday.json.
     */
    set?: string;
    /**
     * `max_tokens` of every answer request (default 128); a reply cut off there scores zero.
     */
    maxTokens?: number;
  };
  /**
   * At most this many items per lm-eval task (its --limit), for a quick look; default every item.
   */
  limit?: number;
  /**
   * Requests in flight at once (grader: 16).
   */
  concurrency?: number;
  /**
   * `max_tokens` of every request (grader: 4096).
   */
  maxTokens?: number;
  /**
   * Per-request deadline in seconds (grader: 300); a request past it scores zero.
   */
  timeoutS?: number;
  /**
   * The `model` field sent; the server accepts any name.
   */
  model?: string;
  /**
   * Limits for running generated code against the tests.
   */
  sandbox?: {
    /**
     * Wall-clock limit per test run (default 6).
     */
    timeLimitS?: number;
    /**
     * Address-space limit per test run (default 1024).
     */
    memoryMiB?: number;
    /**
     * Cap on captured stdout per test run (default 1 MiB).
     */
    outputBytes?: number;
    /**
     * Test programs run at once (default 2).
     */
    concurrency?: number;
  };
  /**
   * Optional: choose a default by measuring each value on `selection` sets only (the sweep refuses `evaluation` data).
   */
  sweep?: {
    /**
     * Request field the value is sent in (e.g. `reasoning_budget`).
     */
    parameter: string;
    /**
     * @minItems 1
     */
    values: [number, ...number[]];
    /**
     * Selection set files (repository-relative); default: every file in data/selection/.
     */
    sets?: string[];
  };
  /**
   * Seconds the server may take to answer /health 200 (grader: 300).
   */
  startupLimitS?: number;
}
