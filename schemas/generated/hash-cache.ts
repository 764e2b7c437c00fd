/* Generated from schemas/engine/hash-cache.schema.json by scripts/gen-types.ts. Do not edit. */

export type BigUint = string;

/**
 * File digests cached by stat identity (.ternforge/hash-cache.json), so a no-op run only stats. Big integers are decimal strings (bigint stats, nanoseconds).
 */
export interface HashCache {
  schema: 1;
  /**
   * Absolute path -> the stat identity it had when hashed, and its digest.
   */
  entries: {
    [k: string]: {
      dev: BigUint;
      ino: BigUint;
      size: BigUint;
      mtimeNs: BigUint;
      ctimeNs: BigUint;
      /**
       * Wall-clock time the read began; an entry whose mtime is not older than this minus the racy margin is not trusted.
       */
      hashedAtNs: string;
      sha256: string;
    };
  };
}
