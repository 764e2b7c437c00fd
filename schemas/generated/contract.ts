/* Generated from schemas/contract.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * schemas/contract.json: the values TypeScript (pack, audit, emit, report) and Python (quantize, the server) must agree on, written once. TypeScript reads it through lib/contract.ts, Python through python/ternforge_server/contract.py; emit ships it inside the submission's server package, so the served box (Python only) reads the same file.
 */
export interface Contract {
  /**
   * Version of this layout.
   */
  format: 'ternforge-contract/1';
  /**
   * Tensor names of the source checkpoint (DESIGN.md section 4).
   */
  tensors: {
    /**
     * A source tensor whose name starts with one of these is exempt: not audited, stored as float if at all, never loaded by the server (the vision tower and the MTP head). Matched at the start of the name only.
     *
     * @minItems 1
     */
    exempt_prefixes: [string, ...string[]];
    /**
     * Where a multimodal checkpoint keeps its text model; the server maps it to the text-only model's `model.`.
     */
    text_prefix: string;
    /**
     * The output head's source name; outside the gates' audited set.
     */
    output_head: string;
    /**
     * A name ending in this is the input embedding; outside the gates' audited set.
     */
    embedding_suffix: string;
  };
  /**
   * The grader's thresholds (DESIGN.md section 2), the same for every profile.
   */
  gates: {
    /**
     * Gate 1: the audited set's ternary fraction must exceed this (strictly).
     */
    ternary_fraction_min: number;
    /**
     * Gate 2: stored / original parameters of the audited set must not exceed this.
     */
    stored_ratio_max: number;
    /**
     * Gate 4: GET /health answers 200 within this many seconds of serve.sh starting.
     */
    startup_limit_s: number;
  };
  /**
   * How the server divides gate 4's seconds (the start-up budget in README and evidence/startup-budget.json counts the same).
   */
  startup: {
    /**
     * Seconds kept back from vLLM's share of the start-up limit for the built-in engine to load and warm up should vLLM fail late: twice bench/startup-rates.json's estimate builtin_fallback.
     */
    builtin_reserve_s: number;
  };
  /**
   * The 2-bit packing convention (DESIGN.md section 2): code c = t + code_offset, codes_per_byte codes per byte, least significant bits first, row-major.
   */
  packing: {
    code_bits: 2;
    codes_per_byte: 4;
    /**
     * c = t + code_offset for t in {-1, 0, 1}.
     */
    code_offset: 1;
    /**
     * The one 2-bit value that is no code; a byte holding it is refused.
     */
    invalid_code: 3;
    /**
     * A group size must be a multiple of this (and divide `in`).
     */
    group_size_multiple: number;
    /**
     * The largest scale accepted (the largest finite float16); scales are finite and in (0, scale_max].
     */
    scale_max: number;
    /**
     * The packing field a manifest must carry, exactly (schemas/manifest.schema.json pins the same strings; the server refuses a manifest whose packing differs).
     */
    manifest: {
      codes: string;
      code_dtype: string;
      scale_dtype: string;
      layout: string;
      formula: string;
    };
    /**
     * Ternary matrices and the bytes they pack to (hex, row-major): both packers must produce exactly these, both unpackers must invert them.
     *
     * @minItems 1
     */
    golden: [
      {
        /**
         * [out, in] values in {-1, 0, 1}; in a multiple of 4.
         *
         * @minItems 1
         */
        ternary: [
          [-1 | 0 | 1, -1 | 0 | 1, -1 | 0 | 1, -1 | 0 | 1, ...(-1 | 0 | 1)[]],
          ...[-1 | 0 | 1, -1 | 0 | 1, -1 | 0 | 1, -1 | 0 | 1, ...(-1 | 0 | 1)[]][]
        ];
        /**
         * The packed U8 tensor [out, in/4], row-major, as lowercase hex.
         */
        packed_hex: string;
      },
      ...{
        /**
         * [out, in] values in {-1, 0, 1}; in a multiple of 4.
         *
         * @minItems 1
         */
        ternary: [
          [-1 | 0 | 1, -1 | 0 | 1, -1 | 0 | 1, -1 | 0 | 1, ...(-1 | 0 | 1)[]],
          ...[-1 | 0 | 1, -1 | 0 | 1, -1 | 0 | 1, -1 | 0 | 1, ...(-1 | 0 | 1)[]][]
        ];
        /**
         * The packed U8 tensor [out, in/4], row-major, as lowercase hex.
         */
        packed_hex: string;
      }[]
    ];
    /**
     * Bytes that hold the invalid code in some field: every unpacker refuses each.
     *
     * @minItems 1
     */
    invalid_bytes: [number, ...number[]];
  };
  /**
   * quantization_manifest.json's `format` (schemas/manifest.schema.json pins the same string).
   */
  manifest_format: string;
  /**
   * File names of the submission directory (DESIGN.md section 2), relative to its root.
   */
  submission: {
    entrypoint: string;
    manifest: string;
    architecture: string;
    weights_dir: string;
    wheels_dir: string;
    evidence_dir: string;
    /**
     * The locked serving requirements serve.sh installs.
     */
    requirements: string;
    /**
     * Put on PYTHONPATH by serve.sh.
     */
    server_dir: string;
    server_package: string;
    /**
     * This file's name inside the server package of a submission (server_dir/server_package/contract).
     */
    contract: string;
    /**
     * The C toolchain's pieces that are not wheels (the target CPython's headers, toolchain.json), present when vendor-wheels was given python_headers; the server uses them when the box has no compiler or headers for Triton.
     */
    toolchain_dir: string;
  };
  /**
   * OpenAI's range for presence_penalty and frequency_penalty: what a request may send and what architecture.json's sampling_defaults may hold.
   */
  sampling: {
    penalty_min: number;
    penalty_max: number;
  };
  /**
   * The server's bounds on one API request: /v1/completions `logprobs` (OpenAI's limit, 5), chat `top_logprobs` (OpenAI's, 20), and prompts in one /v1/completions request (a 400 naming `prompt` above it).
   */
  api: {
    max_completion_logprobs: number;
    max_chat_top_logprobs: number;
    max_prompts: number;
  };
}
