/* Generated from schemas/stages/quality.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * The profile section of the quality stage: how much held-out text to measure, and where. The packed model is loaded through the server's own loader.
 */
export interface QualityParams {
  /**
   * Tokens per held-out sequence (default 256).
   */
  seq_len?: number;
  /**
   * Held-out sequences measured (default: every full one).
   */
  sequences?: number;
  /**
   * Sequences per forward pass (default 4).
   */
  batch_size?: number;
  /**
   * Where both models run (default cpu).
   */
  device?: 'cpu' | 'cuda' | 'auto';
  /**
   * Compute dtype of both models (default float32).
   */
  dtype?: 'float32' | 'bfloat16';
  seed?: number;
}
