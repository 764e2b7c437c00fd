/* Generated from schemas/workers/math-verify-result.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * The `result` event of `python -m ternforge math-verify` (python/ternforge/mathcheck.py): math-verify's verdict on each (reply, reference) pair, in order.
 */
export interface MathVerifyResult {
  event: 'result';
  math_verify: string;
  verdicts: {
    correct: boolean;
    /**
     * The answer math-verify read from the reply; null when it found none.
     */
    extracted: string | null;
    gold: string | null;
  }[];
}
