/* Generated from schemas/stages/pack.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * The profile section of the pack stage.
 */
export interface PackParams {
  /**
   * Upper bound on a weights shard's data bytes before a new shard starts (a larger single tensor gets its own shard). Default 2 GiB.
   */
  shard_size_bytes?: number;
  /**
   * Whether the source ties the input embedding and the output head. Default: tied when the interchange has an *embed_tokens.weight and no lm_head.weight.
   */
  tie_word_embeddings?: boolean;
}
