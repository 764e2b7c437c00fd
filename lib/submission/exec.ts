/**
 * Run one command to completion through zx (stdout and stderr drained concurrently, never one after the
 * other), with cancellation through an AbortSignal that ends the child's whole process group (zx's `kill`:
 * every descendant, then the group). zx is imported on first use: its ~100-200 ms import is not paid by a
 * pipeline run that starts no command.
 */
import type { ProcessPromise } from 'zx';

/** What a finished command left behind. */
export interface ExecOutput {
  /** Exit code, or null when a signal ended it (or it never started). */
  code: number | null;
  signal: string | null;
  stdout: string;
  stderr: string;
  /** Set when the command could not be started at all (not found, not executable). */
  spawnError?: string;
  /** The command line, for messages. */
  command: string;
}

export interface ExecOptions {
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  signal?: AbortSignal;
  /** Called with each output line as it arrives (both streams). */
  onLine?: (line: string) => void;
  /** Called once the child runs, with its pid (= its process group: it runs detached). */
  onSpawn?: (pid: number) => void;
}

/** Run `cmd args...`; resolves (never rejects) once the child has exited. */
export async function exec(cmd: string, args: readonly string[], o: ExecOptions = {}): Promise<ExecOutput> {
  const command = [cmd, ...args].join(' ');
  const env = o.env ?? process.env;
  const { $, which } = await import('zx');
  // zx runs through a shell, where a missing program is exit 127; say it could not start instead.
  const program = which.sync(cmd, { nothrow: true, path: env.PATH ?? '' });
  if (program === null) return { code: null, signal: null, stdout: '', stderr: '', spawnError: `spawn ${cmd} ENOENT (not found, or not executable)`, command };
  const child: ProcessPromise = $({ cwd: o.cwd ?? process.cwd(), env, nothrow: true, quiet: true, detached: true, stdio: ['ignore', 'pipe', 'pipe'] })`${program} ${[...args]}`;
  child.run();
  if (child.pid !== undefined) o.onSpawn?.(child.pid);
  if (o.onLine !== undefined) {
    const onLine = o.onLine;
    for (const stream of [child.stdout, child.stderr]) {
      let pending = '';
      stream.on('data', (d: Buffer) => {
        pending += d.toString('utf8');
        const lines = pending.split('\n');
        pending = lines.pop() ?? '';
        for (const line of lines) onLine(line);
      });
    }
  }
  const stop = (): void => void killGroup(child);
  if (o.signal?.aborted) stop();
  o.signal?.addEventListener('abort', stop, { once: true });
  try {
    const out = await child;
    return { code: out.exitCode, signal: out.signal, stdout: out.stdout, stderr: out.stderr, command };
  } finally {
    o.signal?.removeEventListener('abort', stop);
  }
}

/** SIGKILL to the child, its descendants and its process group (it runs detached, as a group leader). */
function killGroup(child: ProcessPromise): Promise<void> {
  return child.kill('SIGKILL').catch(() => undefined); // already gone
}

/** The last `n` lines of a text. */
export function tail(text: string, n = 30): string {
  return text.trimEnd().split('\n').slice(-n).join('\n');
}
