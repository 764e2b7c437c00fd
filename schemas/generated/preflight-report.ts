/* Generated from schemas/preflight-report.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * <workdir>/.ternforge/<profile>/preflight.json, written by `tsx pipeline.ts preflight` (lib/preflight/command.ts): the go/no-go checks, the projected wall time of each long phase, and the facts they were decided from.
 */
export interface PreflightReport {
  schema: 1;
  profile: string;
  /**
   * ISO 8601 time the preflight finished.
   */
  created: string;
  /**
   * Wall time of the worker (checks and mini-runs).
   */
  seconds: number;
  /**
   * 'measured here', or the gpu-check file (bench/gpu-check.sh) the facts were read from with --facts.
   */
  source: string;
  /**
   * no-go when any check is no-go.
   */
  verdict: 'go' | 'no-go';
  checks: {
    check: string;
    status: 'go' | 'no-go' | 'warn' | 'skip';
    measured: string;
    needed: string;
    detail: string;
  }[];
  phases: {
    phase: string;
    /**
     * Projected wall time on this machine; null where its mini-run did not run.
     */
    seconds: number | null;
    /**
     * What the projection multiplies: counts from the profile, times from the mini-runs.
     */
    basis: string;
  }[];
  /**
   * Sum of the projected phases (the unmeasured ones excluded).
   */
  total_seconds: number;
  unmeasured: string[];
  host: {
    mem_available_bytes: number;
    mem_total_bytes: number;
    disk_free_bytes: number;
    disk_path: string;
  };
  facts: PreflightFacts;
}
export interface PreflightFacts {
  quantize: ResolvedQuantize;
  torch: {
    version: string;
    /**
     * torch.version.cuda: the CUDA the wheel was built for, null for a CPU build.
     */
    cuda_build: string | null;
    cuda_available: boolean;
    devices: {
      name: string;
      total_bytes: number;
      capability: string;
    }[];
    /**
     * The NVIDIA driver (nvidia-smi), null without one.
     */
    driver: string | null;
  };
  kernels: {
    distributions: {
      [k: string]: string | null;
    };
    selected: {
      [k: string]: string;
    };
    fast_path: boolean;
    /**
     * One forward and backward of fla's chunked delta rule at the real width (CUDA with the fast path only).
     */
    run: null | {
      tokens: number;
      heads: number;
      seconds: number;
    };
    run_error: string | null;
  };
  /**
   * The C compiler and Python.h Triton's launcher build needs (ternforge_server/toolchain.py check_toolchain).
   */
  toolchain: {
    ok: boolean;
    cc: string | null;
    python_include: string | null;
    seconds: number | null;
    error: string | null;
  };
  /**
   * The engine that would write the teacher's chat transcripts (python/ternforge/quant/vllm_teacher.py choose, at the launch's ranks).
   */
  chat_engine: {
    /**
     * kd.chat_engine (the profile schema's enum)
     */
    asked: string;
    /**
     * null: kd.chat_engine vllm cannot run here (error says why)
     */
    engine: string | null;
    reason: string | null;
    error: string | null;
    /**
     * vLLM's installed version
     */
    vllm: string | null;
  };
  hub: HubAccess[];
  /**
   * The full model's shape; null when its config.json could not be read (model_error says why).
   */
  model: null | {
    /**
     * Decoder layers by kind.
     */
    layers: {
      [k: string]: number;
    };
    layer_count: number;
    /**
     * Ternary-eligible linear weights in one layer of each kind.
     */
    eligible_per_layer: {
      [k: string]: number;
    };
    embedding_params: number;
    total_params: number;
    hidden: number;
    vocab: number;
    /**
     * Layers in one repetition of the layer pattern: the mini-runs' first depth.
     */
    period: number;
  };
  mini: null | {
    /**
     * The depths measured: one and two periods of the layer pattern; fewer where the teacher could not be built, or where no phase but GPTQ was asked for.
     *
     * @minItems 0
     * @maxItems 2
     */
    depths: [] | [Depth] | [Depth, Depth];
    gptq: null | {
      tokens: number;
      kinds: {
        [k: string]: {
          matrices: number;
          capture_seconds: number;
          quant_seconds: number;
        };
      };
    };
    /**
     * The mini-runs that raised, each recorded once (a phase failed at the first depth is not tried at the second). Absent in results written before it existed.
     */
    failures?: MiniFailure[];
  };
  model_error: string | null;
}
/**
 * The quantize section as the worker parsed it (python/ternforge/quant/config.py parse: its defaults filled in): what the projection multiplies.
 */
export interface ResolvedQuantize {
  method: string;
  group_size: number;
  device: string;
  allow_slow_kernels: boolean;
  calibration: {
    seq_len: number;
    sequences: number;
    batch_size: number;
  };
  allocation: {
    sensitivity: boolean;
  };
  /**
   * micro_batch is resolved: 0 in the profile means batch_size.
   */
  kd: {
    steps: number;
    batch_size: number;
    micro_batch: number;
    seq_len: number;
    chat_prompts: number;
    chat_self_prompts: number;
    chat_max_new: number;
    block_steps: number;
    block_batch: number;
    latent_dtype: string;
  };
}
export interface HubAccess {
  name: string;
  kind: 'model' | 'dataset';
  repo: string;
  ref: string;
  commit: string | null;
  gated: string | boolean | null;
  /**
   * A hub token is configured on this machine.
   */
  token: boolean;
  files: number;
  bytes: number;
  ok: boolean;
  error: string | null;
}
export interface Depth {
  layers: number;
  forward?: {
    tokens: number;
    seconds: number;
  };
  generate?: {
    batch: number;
    steps: number;
    seconds_per_step: number;
  };
  distill?: {
    tokens: number;
    seconds: number;
    steady_bytes: number;
    peak_bytes: number;
    latent_params: number;
  };
}
/**
 * A mini-run that raised (python/ternforge/preflight.py failure()).
 */
export interface MiniFailure {
  /**
   * build: the teacher at this depth could not be made
   */
  phase: 'build' | 'forward' | 'generate' | 'distill' | 'gptq';
  layers: number | null;
  /**
   * out_of_memory: CUDA's allocator, the CPU allocator or Python's MemoryError
   */
  kind: 'out_of_memory' | 'error';
  /**
   * The exception's type and the first line of its message.
   */
  error: string;
}
