/**
 * One run per workspace: `.ternforge/run.lock` holds {pid, hostname, command, since, start_time, boot_id}.
 * It is created atomically (written to a temp file, then hard-linked into place, which fails when it
 * exists), so a reader never sees half a lock. A lock of this host is taken over when its owner is gone:
 * the pid is dead, or it is alive but another process (its start time, /proc/<pid>/stat field 22, differs:
 * the pid was reused), or the lock was written in another boot (boot id differs: after a reboot or a
 * container restart a pid names nothing of ours). A lock of another host (a workspace on a shared file
 * system) is never taken over: its pid and boot id say nothing here.
 */
import { linkSync, mkdirSync, readFileSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { dirname } from 'node:path';
import type { WorkspaceLock } from '../schemas/generated/workspace-lock.ts';
import type { Failure } from './failure.ts';
import { randomSuffix } from './fs-atomic.ts';
import { ENGINE_SCHEMAS, readJsonFile, type SchemaSet } from './json-io.ts';
import { err, ok, type Result } from './result.ts';

/** /proc/<pid>/stat field 22 (start time in clock ticks since boot), or null when unknown. */
export function processStartTime(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name (which may hold spaces and parentheses): state is field 3.
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const v = rest[22 - 3];
    return v !== undefined && /^[0-9]+$/.test(v) ? v : null;
  } catch {
    return null;
  }
}

/** This boot's id, or null where the kernel does not tell. */
export function bootId(): string | null {
  try {
    return readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim() || null;
  } catch {
    return null;
  }
}

/** Why the owner of a lock of this host no longer holds it, or null when it (as far as we can tell) does. */
function ownerGone(owner: WorkspaceLock): string | null {
  const boot = bootId();
  if (owner.boot_id !== undefined && boot !== null && owner.boot_id !== boot) return `process ${owner.pid} of an earlier boot`;
  if (!alive(owner.pid)) return `dead process ${owner.pid}`;
  const started = processStartTime(owner.pid);
  if (owner.start_time !== undefined && started !== null && started !== owner.start_time) return `process ${owner.pid}, now another process (started at tick ${started}, not ${owner.start_time})`;
  return null;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code !== 'ESRCH';
  }
}

/** A held workspace lock. `release` is idempotent and only removes a lock this process owns. */
export interface HeldLock {
  release(): void;
}

export interface AcquireOptions {
  command: string;
  /** Poll until the lock is free instead of failing. */
  wait: boolean;
  /** Said on stderr (take-overs, waiting). */
  note(line: string): void;
}

export async function acquireWorkspaceLock(path: string, schemas: SchemaSet, opts: AcquireOptions): Promise<Result<HeldLock, Failure>> {
  mkdirSync(dirname(path), { recursive: true });
  const start = processStartTime(process.pid);
  const boot = bootId();
  const mine: WorkspaceLock = { pid: process.pid, hostname: hostname(), command: opts.command, since: new Date().toISOString(), ...(start !== null ? { start_time: start } : {}), ...(boot !== null ? { boot_id: boot } : {}) };
  const text = JSON.stringify(mine, null, 2) + '\n';
  let announcedWait = false;
  for (;;) {
    const tmp = `${path}.tmp-${process.pid}-${randomSuffix()}`;
    writeFileSync(tmp, text);
    try {
      linkSync(tmp, path);
      rmSync(tmp, { force: true });
      return ok(makeHeld(path, text));
    } catch (e) {
      rmSync(tmp, { force: true });
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    }
    const read = readJsonFile<WorkspaceLock>(path, schemas, ENGINE_SCHEMAS.workspaceLock);
    if (read.ok && read.value === null) continue; // released meanwhile
    if (!read.ok) {
      // Not written by a lock holder (the link makes a lock whole): stale garbage, take it over.
      opts.note(`removing an unreadable workspace lock ${path}`);
      rmSync(path, { force: true });
      continue;
    }
    const owner = read.value!;
    const gone = owner.hostname === mine.hostname ? ownerGone(owner) : null;
    if (gone !== null) {
      opts.note(`taking over the workspace lock of ${gone} (${owner.command}, since ${owner.since})`);
      // Only remove it if it is still the same dead owner's lock (another run may have taken it over).
      const again = readJsonFile<WorkspaceLock>(path, schemas, ENGINE_SCHEMAS.workspaceLock);
      if (again.ok && again.value !== null && again.value.pid === owner.pid && again.value.since === owner.since) rmSync(path, { force: true });
      continue;
    }
    if (!opts.wait) return err({ reason: 'workspace-locked', lockPath: path, ownerPid: owner.pid, ownerCommand: owner.command, since: owner.since, ...(owner.hostname !== mine.hostname ? { ownerHost: owner.hostname } : {}) });
    if (!announcedWait) {
      opts.note(`waiting for the workspace lock held by pid ${owner.pid} (${owner.command}, since ${owner.since})`);
      announcedWait = true;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
}

function makeHeld(path: string, text: string): HeldLock {
  let held = true;
  const release = (): void => {
    if (!held) return;
    held = false;
    try {
      if (readFileSync(path, 'utf8') === text) unlinkSync(path);
    } catch {
      /* already gone */
    }
  };
  process.once('exit', release);
  return { release };
}
