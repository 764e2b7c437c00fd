/* Generated from schemas/engine/stage-key.schema.json by scripts/gen-types.ts. Do not edit. */

export type Sha256Hex = string;

/**
 * Everything that decides a stage's outputs. Its canonical JSON (sorted keys) hashed with sha256 is the stage key: same key, same outputs, so the stage is skipped or restored from the run cache.
 */
export interface StageKeyData {
  /**
   * Engine format version: bumped when the engine changes how it runs stages or lays out outputs, so every key changes with it.
   */
  format: number;
  /**
   * The stage name: two stages with the same code and params still have different keys.
   */
  stage: string;
  code: DigestMap;
  /**
   * The stage's own section of the profile, exactly as validated.
   */
  params: {
    [k: string]: unknown;
  };
  inputs: DigestMap1;
  upstream: DigestMap2;
  /**
   * Declared tool versions (node, python, torch); python and torch come from the venv's ternforge-env.json.
   */
  tools: {
    [k: string]: string;
  };
  /**
   * Other facts a stage declares about its environment (python-env: the system Python's version).
   */
  facts: {
    [k: string]: string;
  };
}
/**
 * The stage's own code: repository-relative file path -> sha256 of its bytes (directories expanded, __pycache__ ignored).
 */
export interface DigestMap {
  [k: string]: Sha256Hex;
}
/**
 * Declared input files outside the graph: path as declared -> sha256 of its bytes.
 */
export interface DigestMap1 {
  [k: string]: Sha256Hex;
}
/**
 * Each direct upstream stage -> the digest of its current output listing (not its key), so an upstream rerun with byte-identical outputs leaves this stage fresh (early cutoff).
 */
export interface DigestMap2 {
  [k: string]: Sha256Hex;
}
