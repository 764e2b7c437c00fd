/* Generated from schemas/workers/quality-result.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * The `result` event of `python -m ternforge quality` (python/ternforge/quality.py): held-out perplexity of the packed model and of the source, and their agreement.
 */
export interface QualityResult {
  event: 'result';
  /**
   * The report's file name inside the outputs.
   */
  quality: string;
  ppl: number;
  ppl_reference: number;
  ppl_ratio: number;
  top1_agreement: number;
  kl: number;
}
