/* Generated from schemas/stages/quantize.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * The profile section of the quantize stage: the method and group size of the ternary codes.
 */
export interface QuantizeParams {
  /**
   * absmean (data-free, per tensor); none (float build, the baseline); twn (data-free threshold + searched scale); gptq (calibrated, sequential); gptq+kd (GPTQ then distillation from the full-precision teacher).
   */
  method: 'absmean' | 'none' | 'twn' | 'gptq' | 'gptq+kd';
  /**
   * Consecutive weights along `in` sharing one F32 scale; must divide every ternary row length.
   */
  group_size: number;
  /**
   * Regular expressions of tensor names kept in float (besides the fixed small tensors).
   */
  keep_float?: string[];
  /**
   * Size cap of each interchange safetensors file.
   */
  max_file_bytes?: number;
  /**
   * Seed of every random choice (calibration sampling, distillation batches).
   */
  seed?: number;
  /**
   * cpu, cuda, cuda:N or auto.
   */
  device?: string;
  /**
   * Compute dtype for the model-level methods (float32, bfloat16, auto).
   */
  dtype?: string;
  /**
   * Calibration batches drawn from fetch-calib's calibration tokens.
   */
  calibration?: {
    seq_len?: number;
    sequences?: number;
    batch_size?: number;
  };
  /**
   * Float budget: which further tensors stay float, by measured sensitivity.
   */
  allocation?: {
    target_fraction?: number;
    min_relative_score?: number;
    /**
     * Measure per-tensor sensitivity on calibration data to choose the extra float tensors.
     */
    sensitivity?: boolean;
  };
  /**
   * GPTQ settings (names as in gptq.py).
   */
  gptq?: {
    blocksize?: number;
    percdamp?: number;
    actorder?: boolean;
    scale_search?: boolean;
  };
  /**
   * Distillation settings.
   */
  kd?: {
    steps?: number;
    lr?: number;
    scale_lr?: number;
    weight_decay?: number;
    temperature?: number;
    hidden_mse?: number;
    batch_size?: number;
    seq_len?: number;
    sequences?: number;
    checkpoint_every?: number;
    grad_clip?: number;
    /**
     * Learning-rate schedule: constant, or linear warm-up then a half cosine to zero at `steps` (then `steps` is part of the checkpoint digest).
     */
    schedule?: 'constant' | 'cosine';
    /**
     * Linear warm-up steps of the cosine schedule.
     */
    warmup?: number;
    /**
     * Chat transcripts written by the full-precision teacher (prompts built from calibration text, answered greedily) added to the distillation windows; 0: calibration text only.
     */
    chat_prompts?: number;
    /**
     * Further chat transcripts whose request the teacher writes itself (fed the template up to a user message, sampled with the quantize seed; the Magpie recipe), answered greedily like the others. No outside text enters them.
     */
    chat_self_prompts?: number;
    /**
     * Longest teacher answer, in tokens, per chat transcript.
     */
    chat_max_new?: number;
    /**
     * Each position's KL counts 1 + stop_weight * (the teacher's probability of an end-of-turn token there) times in the mean, so the student learns where answers end; 0: every position alike.
     */
    stop_weight?: number;
    /**
     * Positions per chunk of the head and KL (recomputed in backward); 0: full logits at once.
     */
    logit_chunk?: number;
  };
}
