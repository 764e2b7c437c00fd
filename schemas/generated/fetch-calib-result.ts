/* Generated from schemas/workers/fetch-calib-result.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * The `result` event of `python -m ternforge fetch-calib` (python/ternforge/calib/fetch.py) when it wrote the token files and the data manifest.
 */
export interface FetchCalibResult {
  event: 'result';
  ok: true;
  /**
   * The data manifest's file name inside the outputs.
   */
  manifest: string;
  /**
   * Sources tokenised.
   */
  sources: number;
  /**
   * Role -> tokens written for it.
   */
  tokens_by_role: {
    [k: string]: number;
  };
}
