/* Generated from schemas/quality-report.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * quality.json, written by the quality worker (python/ternforge/quality.py) and shipped as evidence/quality.json: held-out perplexity of the packed model and of the source, agreement, and per-tensor error. The fields the report reads are required; the worker may add more.
 */
export interface QualityReport {
  format: string;
  metrics: {
    ppl: number;
    ppl_reference: number;
    ppl_ratio: number;
    top1_agreement: number;
    kl: number;
  };
}
