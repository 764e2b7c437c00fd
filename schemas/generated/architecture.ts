/* Generated from schemas/architecture.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * architecture.json of a submission, written by emit: what model this is (a summary of config.json), how its weights are packed, which checkpoint it came from, and where in the submission each claim can be checked. Derived only from files that ship beside it.
 */
export interface Architecture {
  /**
   * Version of this layout.
   */
  format: 'ternforge-architecture/1';
  /**
   * The checkpoint quantized (from the manifest); the reviewer checks it is the pinned one.
   */
  base_model: {
    id: string;
    revision: string;
  };
  /**
   * A summary of config.json.
   */
  model: {
    /**
     * config.json's model_type (qwen3_5, llama).
     */
    model_type: string;
    architectures: string[];
    /**
     * The text model the server builds (text_config when the config nests one).
     */
    text: {
      model_type: string;
      num_hidden_layers: number;
      hidden_size: number;
      intermediate_size: number;
      num_attention_heads: number;
      num_key_value_heads: number;
      head_dim?: number;
      vocab_size: number;
      max_position_embeddings?: number;
      /**
       * One entry per layer (linear_attention, full_attention); all full_attention when the config has none.
       */
      layer_types: string[];
      layer_type_counts: {
        [k: string]: number;
      };
      /**
       * Input embedding and output head share one tensor, stored once.
       */
      tie_word_embeddings: boolean;
    };
    /**
     * The source has a vision tower (exempt; never loaded by the server).
     */
    vision_tower: boolean;
    /**
     * MTP head layers in the source (exempt; never loaded).
     */
    mtp_layers: number;
  };
  /**
   * How the ternary weights are stored: the manifest's convention, repeated so a reader needs no code.
   */
  packing: {
    /**
     * Quantization method recorded by quantize.
     */
    method: string;
    /**
     * The manifest's packing block, verbatim.
     */
    convention: {
      [k: string]: string;
    };
    /**
     * Distinct group sizes used.
     */
    group_sizes: number[];
  };
  /**
   * Counts over the manifest's tensors (exempt ones included in total).
   */
  tensors: {
    total: number;
    packed_2bit: number;
    float: number;
    exempt: number;
    /**
     * Tensors stored once for several names.
     */
    tied: number;
    /**
     * Logical weights stored as codes (non-exempt).
     */
    packed_2bit_parameters: number;
    /**
     * Weights stored as floats (non-exempt).
     */
    float_parameters: number;
  };
  /**
   * The source checkpoint's own tensor list (every tensor, from its safetensors headers; no bytes): what verify checks the manifest's coverage against when no --source is given.
   */
  source_tensors?: {
    [k: string]: {
      shape: number[];
      dtype: string;
    };
  };
  serving: {
    /**
     * serve.sh; honours HOST, PORT (default 8000), MODEL_NAME.
     */
    entrypoint: string;
    /**
     * The server package directory.
     */
    server: string;
    /**
     * Locked requirements installed offline from wheels/.
     */
    requirements: string;
    wheels: string;
    /**
     * The server builds the text model only: no vision tower, no MTP.
     */
    text_only: true;
    /**
     * What the server uses for a request that names no penalty (OpenAI's presence_penalty and frequency_penalty: a generated token's logit is lowered by presence_penalty once it has occurred, plus frequency_penalty times its count). A request's own values win.
     */
    sampling_defaults: {
      presence_penalty: number;
      frequency_penalty: number;
    };
  };
  files: {
    manifest: FileRef;
    config: FileRef;
    generation_config?: FileRef;
    chat_template?: FileRef;
    tokenizer: FileRef[];
    weights: FileRef[];
  };
  /**
   * Pointers into evidence/: name -> path relative to the submission root (audit, source, wheels, and what the report stage adds).
   */
  evidence: {
    [k: string]: string;
  };
}
/**
 * A file of the submission, relative to its root, with the bytes it must have.
 */
export interface FileRef {
  file: string;
  size: number;
  sha256: string;
}
