/* Generated from schemas/engine/workspace-lock.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * The owner of .ternforge/run.lock: one run per workspace. Taken over when the owner pid is dead on this host.
 */
export interface WorkspaceLock {
  pid: number;
  hostname: string;
  /**
   * The owner's command line, for the message a second run prints.
   */
  command: string;
  /**
   * ISO time the lock was taken.
   */
  since: string;
}
