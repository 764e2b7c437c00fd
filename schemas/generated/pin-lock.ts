/* Generated from schemas/engine/pin-lock.schema.json by scripts/gen-types.ts. Do not edit. */

export type LockedFile = LockedFile1 & {
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
export type LockedFile1 = {
  [k: string]: unknown;
};

/**
 * The committed lock of a profile's pinned sources (profiles/<profile>.lock.json, beside the profile): for each stage that declares pins, each source's request (the ref the profile names), the commit it resolved to, and every file's size and hash as the source lists it. Written by the first run that needs it or by `tsx pipeline.ts lock [--update]`; it enters the stage key.
 */
export interface PinLockFile {
  /**
   * Format version; a reader refuses any other.
   */
  schema: 1;
  /**
   * The profile this lock belongs to (its file name without .lock.json).
   */
  profile: string;
  /**
   * Stage name -> source name -> its locked source.
   */
  stages: {
    [k: string]: {
      [k: string]: LockedSource;
    };
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
