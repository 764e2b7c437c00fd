/* Generated from schemas/engine/lock-file.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * What was observed when each stage of one profile last produced its current outputs (.ternforge/<profile>/lock.json). Pretty-printed with sorted keys, rewritten only when an entry changes, written after the outputs are in place.
 */
export interface LockFile {
  /**
   * Lock format version; a reader refuses any other.
   */
  schema: 1;
  /**
   * The profile this lock belongs to (equal to its directory name).
   */
  profile: string;
  /**
   * Stage name -> its entry.
   */
  stages: {
    [k: string]: LockEntry;
  };
}
export interface LockEntry {
  /**
   * sha256 of keyData's canonical JSON: equal to the current key means fresh.
   */
  key: string;
  keyData: StageKeyData;
  /**
   * Digest of the output listing the stage's `outputs` link points at (in-place stages: of their marker file); checked before a stage counts as fresh.
   */
  outputDigest: string;
  /**
   * How the outputs are kept (see OutputMode in engine/types.ts).
   */
  outputMode: 'content' | 'uncached' | 'in-place';
}
/**
 * The key's fields, kept so `status --why` can diff them field by field.
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
  [k: string]: string;
}
/**
 * Declared input files outside the graph: path as declared -> sha256 of its bytes.
 */
export interface DigestMap1 {
  [k: string]: string;
}
/**
 * Each direct upstream stage -> the digest of its current output listing (not its key), so an upstream rerun with byte-identical outputs leaves this stage fresh (early cutoff).
 */
export interface DigestMap2 {
  [k: string]: string;
}
