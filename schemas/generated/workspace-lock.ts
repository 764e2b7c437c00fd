/* Generated from schemas/engine/workspace-lock.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * The owner of .ternforge/run.lock: one run per workspace. Taken over when, on this host, the owner pid is dead, or is a different process (its start time differs) or is from an earlier boot (the boot id differs).
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
  /**
   * The owner's start time in clock ticks since boot (/proc/<pid>/stat field 22): a live pid with another start time is another process.
   */
  start_time?: string;
  /**
   * /proc/sys/kernel/random/boot_id when the lock was taken: after a reboot (or in another container boot) the pid names nothing of ours.
   */
  boot_id?: string;
}
