/**
 * smoke-serve's scratch directories and what a killed run leaves behind.
 *
 * Each run works in `<workdir>/.ternforge/<profile>/smoke-serve/scratch-<pid>` (not the system temp
 * directory), whose `owner.json` names the run's process (pid and start time). The runner's process
 * group is written to `runner.pgid` and the server's to `server.pgid`. A run that ends normally removes
 * its directory itself. A run killed with SIGKILL cannot, and its runner and server (each in its own
 * process group, `detached`) would live on. So every run first calls `reapStaleScratch`: for each
 * scratch directory whose owner is gone it SIGKILLs what that run started and deletes the directory.
 *
 * "What that run started" is every process whose environment or working directory lies inside the
 * scratch directory (every process of a smoke run gets HOME and TMPDIR there, so one that left its group
 * with setsid, or was started before its group was recorded, is found too), plus every member of a
 * recorded group that holds such a process. A recorded group id since reused by unrelated processes holds
 * none, so it is not touched.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { processStartTime } from '../../engine/workspace-lock.ts';

export const OWNER_FILE = 'owner.json';
export const RUNNER_PGID_FILE = 'runner.pgid';
export const SERVER_PGID_FILE = 'server.pgid';

interface Owner {
  pid: number;
  start_time: string | null;
}

/** The directory holding smoke-serve's scratch directories for a profile. */
export function scratchBase(workdir: string, profile: string): string {
  return join(workdir, '.ternforge', profile, 'smoke-serve');
}

/** Make this process's scratch directory (emptied if a dead run of the same pid left one) and claim it. */
export function makeScratch(base: string): string {
  const dir = join(base, `scratch-${process.pid}`);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const owner: Owner = { pid: process.pid, start_time: processStartTime(process.pid) };
  writeFileSync(join(dir, OWNER_FILE), JSON.stringify(owner) + '\n');
  return dir;
}

function ownerAlive(dir: string): boolean {
  let owner: Owner;
  try {
    owner = JSON.parse(readFileSync(join(dir, OWNER_FILE), 'utf8')) as Owner;
  } catch {
    return false; // no owner file: a run killed before it claimed the directory
  }
  if (!Number.isInteger(owner.pid) || owner.pid <= 0) return false;
  const started = processStartTime(owner.pid);
  if (started === null) return false;
  return owner.start_time === null || started === owner.start_time;
}

interface Proc {
  pid: number;
  pgid: number;
  /** Whether its environment or working directory names the scratch directory. */
  names: boolean;
}

/** Every live process this user can read, from /proc, and whether it names dir. */
function processes(dir: string): Proc[] {
  const out: Proc[] = [];
  const inside = dir + '/';
  for (const e of readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    const pid = Number(e);
    if (pid === process.pid) continue;
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (fields[0] === 'Z') continue; // a zombie holds nothing; its parent reaps it
      const pgid = Number(fields[2]);
      let cwd = '';
      try {
        cwd = readlinkSync(`/proc/${pid}/cwd`);
      } catch {
        /* not ours to read */
      }
      const env = readFileSync(`/proc/${pid}/environ`, 'latin1');
      out.push({ pid, pgid, names: env.includes(inside) || cwd === dir || cwd.startsWith(inside) });
    } catch {
      /* gone, or not ours to read */
    }
  }
  return out;
}

function recordedGroups(dir: string): Set<number> {
  const groups = new Set<number>();
  for (const f of [RUNNER_PGID_FILE, SERVER_PGID_FILE]) {
    const p = join(dir, f);
    if (!existsSync(p)) continue;
    const n = Number(readFileSync(p, 'utf8').trim());
    if (Number.isInteger(n) && n > 1) groups.add(n);
  }
  return groups;
}

/**
 * The processes a smoke run in dir started that are still alive: every process whose environment
 * (HOME, TMPDIR, the start-up report path) or working directory is inside dir, and every member of a
 * recorded group that has such a process in it (a recorded group id now used by unrelated processes
 * has none, and is left alone).
 */
export function leftoverProcesses(dir: string): number[] {
  const procs = processes(dir);
  const groups = recordedGroups(dir);
  const ours = new Set(procs.filter((p) => p.names && groups.has(p.pgid)).map((p) => p.pgid));
  return procs.filter((p) => p.names || ours.has(p.pgid)).map((p) => p.pid);
}

/**
 * SIGKILL what the dead runs of base left and delete their scratch directories; directories whose
 * owner still runs are left alone. Returns what was reaped, for the log.
 */
export async function reapStaleScratch(base: string): Promise<Array<{ dir: string; killed: number }>> {
  if (!existsSync(base)) return [];
  const reaped: Array<{ dir: string; killed: number }> = [];
  for (const e of readdirSync(base)) {
    if (!e.startsWith('scratch-')) continue;
    const dir = join(base, e);
    if (ownerAlive(dir)) continue;
    let pids = leftoverProcesses(dir);
    const killed = pids.length;
    for (let i = 0; i < 50 && pids.length > 0; i++) {
      for (const pid of pids) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          /* gone */
        }
      }
      await new Promise((r) => setTimeout(r, 50));
      pids = leftoverProcesses(dir);
    }
    if (pids.length > 0) throw new Error(`processes ${pids.join(', ')} of the dead smoke run in ${dir} survived SIGKILL for 2.5 s`);
    rmSync(dir, { recursive: true, force: true });
    reaped.push({ dir, killed });
  }
  return reaped;
}

/** What a run does first: end what killed runs left in base, then make and claim its own scratch. */
export async function prepareScratch(base: string, log?: (line: string) => void): Promise<string> {
  for (const r of await reapStaleScratch(base)) log?.(`a killed smoke run left ${r.dir}: ended its ${r.killed} process(es), removed the directory`);
  return makeScratch(base);
}
