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
   * Regular expressions (searched in the tensor name) of tensors kept in float besides the forced small tensors, for every method.
   */
  keep_float?: string[];
  /**
   * Size cap of each interchange safetensors file, for every method.
   */
  max_file_bytes?: number;
  /**
   * Seed of every random choice (calibration sampling, distillation batches).
   */
  seed?: number;
  /**
   * cpu, cuda or cuda:N.
   */
  device?: string;
  /**
   * On a CUDA device, run even when transformers would take its PyTorch Gated DeltaNet delta rule (flash-linear-attention not importable; about 5x slower, PLAN.md section 0). Off: the worker refuses before loading the model (reason kernels-missing).
   */
  allow_slow_kernels?: boolean;
  /**
   * Dtype of the float model the calibrated methods load and of the distillation teacher (GPTQ accumulates in float32 whatever it is).
   */
  dtype?: 'float32' | 'bfloat16' | 'float16';
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
    /**
     * Sweep columns by decreasing Hessian diagonal (default true).
     */
    actorder?: boolean;
    /**
     * How each group's scale is searched (twn.group_scales): exact (every threshold) or grid (ratios of mean |W|).
     */
    scale_search?: 'exact' | 'grid';
    /**
     * gptq+kd only: windows of calibration.seq_len tokens over the distillation's teacher-written chat transcripts, added to the calibration batches GPTQ fits on (the teacher writes them before GPTQ runs). 0 (default): calibration text only.
     */
    chat_windows?: number;
  };
  /**
   * TWN settings (twn.py).
   */
  twn?: {
    /**
     * Threshold search per group: exact or grid.
     */
    search?: 'exact' | 'grid';
  };
  /**
   * Distillation settings.
   */
  kd?: {
    steps?: number;
    lr?: number;
    scale_lr?: number;
    /**
     * Learning rate of every norm's gain (the student's `*norm.weight`, kept float by the float-budget plan), trained beside the codes from an fp32 master copy and written in place of the source values (Norm Tweaking, Li et al. 2024). 0 (default): norms stay the source's.
     */
    norm_lr?: number;
    /**
     * Learning rate of every linear the float-budget plan keeps float (the budget's matrices and the small in_proj_a/in_proj_b; never the embedding or the output head), trained beside the codes from an fp32 master copy and written in place of the source values. 0 (default): they stay the source's.
     */
    float_lr?: number;
    weight_decay?: number;
    temperature?: number;
    hidden_mse?: number;
    /**
     * Weight of the hidden-state cosine term (TernaryLLM's OFF): mean over layers and positions of 1 - cos(student hidden state, teacher hidden state), added to the KL; 0 (default): off.
     */
    hidden_cos?: number;
    /**
     * Rows per optimizer step (the effective batch).
     */
    batch_size?: number;
    /**
     * Window length in tokens; 0 or absent: the calibration section's.
     */
    seq_len?: number;
    /**
     * Calibration-text windows; absent: all there are.
     */
    sequences?: number;
    /**
     * Steps between distillation checkpoints (U, scales and their Adam moments: what resuming needs).
     */
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
     * The first words of the teacher-written requests, one per draw in turn ("": the teacher writes the whole request). Generic words of ours such as "What" or "How many" steer it to the short questions users ask; never evaluation items. Default [""].
     *
     * @minItems 1
     */
    chat_self_openers?: [string, ...string[]];
    /**
     * Longest teacher answer, in tokens, per chat transcript.
     */
    chat_max_new?: number;
    /**
     * Who writes the teacher's chat transcripts (python/ternforge/quant/vllm_teacher.py): transformers' generate (default); vLLM's offline API at serving speed, or a clear error where vLLM does not import or several ranks run; auto: vLLM where it can run, else generate with the reason logged. The report's kd.data.chat_engine says which wrote them.
     */
    chat_engine?: 'transformers' | 'vllm' | 'auto';
    /**
     * Block-wise reconstruction before the distillation (EfficientQAT's Block-AP): for each decoder layer in turn, this many AdamW steps train only that layer's codes and scales (rates `block_lr` and `block_scale_lr` along a half cosine) so its output on the student's own inputs matches the teacher layer's output (squared error relative to the teacher's, per position). 0 (default): none.
     */
    block_steps?: number;
    /**
     * Windows of the distillation data (drawn with the quantize seed) that Block-AP trains on; their hidden states are cached, two per window per layer boundary. Default 256.
     */
    block_sequences?: number;
    /**
     * Block-AP's learning rate for the latent codes U. Default 1e-2: at the distillation's 0.025 the layers' errors diverged on smol (with a plain mean squared error).
     */
    block_lr?: number;
    /**
     * Block-AP's learning rate for the scales. Default 1.6e-4 (the distillation's ratio of the two rates).
     */
    block_scale_lr?: number;
    /**
     * Windows per Block-AP step. Default 8.
     */
    block_batch?: number;
    /**
     * The last N of the steps train on the data so far plus the student's own greedy answers to the same chat requests, written by the student as it is when they start (on-policy distillation, GKD): the teacher's logits over the student's text show it where to stop instead of looping on. At most `steps`; needs chat requests. 0: off.
     */
    onpolicy_steps?: number;
    /**
     * Each position's KL counts 1 + stop_weight * (the teacher's probability of an end-of-turn token there) times in the mean, so the student learns where answers end; 0: every position alike.
     */
    stop_weight?: number;
    /**
     * Positions per chunk of the head and KL (recomputed in backward); 0: full logits at once.
     */
    logit_chunk?: number;
    /**
     * Rows per forward/backward; gradients accumulate over batch_size / micro_batch of them (must divide batch_size). 0 or absent: batch_size.
     */
    micro_batch?: number;
    /**
     * Recompute each decoder layer in the backward pass, keeping only its input (default true).
     */
    grad_checkpointing?: boolean;
    /**
     * Dtype of the latent codes U, their gradient and Adam moments; bfloat16 halves them (the 80 GB plan in quant/PLAN.md).
     */
    latent_dtype?: 'float32' | 'bfloat16';
  };
  /**
   * Run the worker under torchrun (`python -m torch.distributed.run`, started by the stage itself) with nproc_per_node x nnodes processes: GPTQ accumulates each rank's share of the calibration batches into one Hessian (codes and scales byte-identical to one process), distillation splits each global batch's micro-batches over the ranks and sums their gradients (python/ternforge/quant/PLAN.md section 4). Absent: one process, no torchrun. In the stage key: only the world size, and only for gptq+kd with kd.micro_batch unset (each rank then steps batch_size / N rows at once). GPTQ writes one process's bytes at any world size; distillation at a set micro-batch takes one process's steps up to the rounding of the ranks' gradient sum, left out of the key like the CPU thread count, so a rerun at another rank count resumes the same checkpoint.
   */
  launch?: {
    /**
     * Processes on each node (one per GPU).
     */
    nproc_per_node?: number;
    /**
     * Nodes; more than one needs rdzv_endpoint. Default 1 (torchrun --standalone).
     */
    nnodes?: number;
    /**
     * host:port of torchrun's c10d rendezvous (the same on every node); default: a standalone rendezvous on this node.
     */
    rdzv_endpoint?: string;
    /**
     * torch.distributed backend; default nccl on a CUDA device, gloo on the CPU.
     */
    backend?: 'gloo' | 'nccl';
    /**
     * gptq+kd: the distillation's trained state (every ternary linear's U and scale, their gradients and Adam moments) whole on every rank (replicate), or split by rows over the ranks (fsdp: FSDP2's fully_shard of each ternary linear) where it does not fit one GPU (fp32 latents on 80 GB; PLAN.md section 4).
     */
    shard?: 'replicate' | 'fsdp';
  };
}
