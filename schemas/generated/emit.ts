/* Generated from schemas/stages/emit.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * The profile section of the emit stage.
 */
export interface EmitParams {
  /**
   * What the server uses for a request that names no penalty (OpenAI's presence_penalty and frequency_penalty: a generated token's logit is lowered by presence_penalty once it has occurred, plus frequency_penalty times its count). A request's own values win.
   */
  sampling_defaults?: {
    presence_penalty: number;
    frequency_penalty: number;
  };
}
