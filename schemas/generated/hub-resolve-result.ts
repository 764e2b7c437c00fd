/* Generated from schemas/workers/hub-resolve-result.schema.json by scripts/gen-types.ts. Do not edit. */

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
 * The `result` event of `python -m ternforge hub-resolve` (python/ternforge/sources/hub_lock.py) when every request resolved: source name -> its lock entry.
 */
export interface HubResolveResult {
  event: 'result';
  ok: true;
  sources: {
    [k: string]: LockedSource;
  };
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
