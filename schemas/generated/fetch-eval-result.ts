/* Generated from schemas/workers/fetch-eval-result.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * The `result` event of `python -m ternforge fetch-eval` (python/ternforge/sources/eval_data.py) when it wrote every declared split.
 */
export interface FetchEvalResult {
  event: 'result';
  ok: true;
  sources: number;
  /**
   * eval-data.json, inside the outputs (schemas/eval-data.schema.json).
   */
  index: string;
}
