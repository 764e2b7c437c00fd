/* Generated from schemas/engine/stage-key.schema.json by scripts/gen-types.ts. Do not edit. */

export type Sha256Hex = string;
export type LockedFile = {
  [k: string]: unknown;
} & {
  /**
   * Size in bytes.
   */
  size: number;
  /**
   * sha256 of the bytes (the hub lists it for LFS files).
   */
  sha256?: string;
  /**
   * git blob sha1 (the hub lists it for files git stores itself).
   */
  git_sha1?: string;
};

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
  /**
   * Only for a stage that declares pinned sources: source name -> its entry in profiles/<profile>.lock.json (the resolved commit and file hashes). Absent otherwise, so other stages' keys do not change.
   */
  pins?: {
    [k: string]: LockedSource;
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
export interface LockedSource {
  request: PinRequest;
  /**
   * The commit the request's ref resolved to; fetches read exactly this commit.
   */
  commit: string;
  /**
   * Repository-relative path -> size and hash; fetched bytes that differ are refused.
   */
  files: {
    [k: string]: LockedFile;
  };
}
/**
 * What a stage asks for: a named source, its kind, repository and ref (branch, tag or commit), and optionally the files wanted (absent: the files the resolver selects).
 */
export interface PinRequest {
  /**
   * The source's name inside its stage (the lock's key).
   */
  name: string;
  /**
   * What the resolver knows it as (hub: model | dataset).
   */
  kind: string;
  /**
   * Repository id, e.g. Qwen/Qwen3.5-4B.
   */
  repo: string;
  /**
   * The branch, tag or commit the profile names.
   */
  ref: string;
  /**
   * The files wanted, when the stage names them.
   */
  files?: string[];
}
