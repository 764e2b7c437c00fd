/* Generated from schemas/engine/run-cache-entry.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * A stage's outputs: every regular file under its output directory, sorted by relative path ('/' separated), with its sha256 and size. The sha256 of this list's canonical JSON is the output digest; a top-level evidence.json is left out of it.
 */
export type OutputListing = {
  path: string;
  sha256: string;
  size: number;
}[];
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
 * One run-cache entry (.ternforge/runs/<key[:2]>/<key>.json): a stage key and the outputs it produced, kept by content in .ternforge/store/<stage>/<outputDigest>/. Validated on read; a corrupt or dangling entry is a miss and is deleted.
 */
export interface RunCacheEntry {
  schema: 1;
  stage: string;
  key: string;
  outputDigest: string;
  listing: OutputListing;
  record: EvidenceRecord;
}
/**
 * The evidence record of the run that produced these outputs; restored beside them.
 */
export interface EvidenceRecord {
  schema: 1;
  stage: string;
  profile: string;
  key: string;
  keyData: StageKeyData;
  /**
   * The exact command line (argv) of the run.
   */
  command: string[];
  outputMode: 'content' | 'uncached' | 'in-place';
  outputDigest: string;
  outputs: OutputListing;
  /**
   * ISO time (not reproducible).
   */
  startedAt: string;
  /**
   * ISO time (not reproducible).
   */
  endedAt: string;
  /**
   * Where it ran (not reproducible).
   */
  host: {
    os: string;
    arch: string;
    cpus: number;
    node: string;
  };
  /**
   * The stage's log lines (worker stderr included).
   */
  log: string[];
  /**
   * The stage's own figures (StageOutcome.summary).
   */
  summary: {};
  /**
   * Present when this profile's outputs were restored from the run cache (same key, same bytes) instead of run: the profile whose run produced them (command, log, startedAt, endedAt and host are that run's) and when they were restored here (not reproducible).
   */
  restoredFrom?: {
    profile: string;
    /**
     * ISO time (not reproducible).
     */
    restoredAt: string;
  };
}
/**
 * Code files and digests, params, input digests, upstream output digests and tool versions: the whole key.
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
