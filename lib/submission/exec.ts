/**
 * Run one command to completion, draining stdout and stderr concurrently (never one after the other),
 * with cancellation through an AbortSignal that ends the child's whole process group.
 */
import { spawn } from 'node:child_process';

/** What a finished command left behind. */
export interface ExecOutput {
  /** Exit code, or null when a signal ended it (or it never started). */
  code: number | null;
  signal: string | null;
  stdout: string;
  stderr: string;
  /** Set when the command could not be started at all (ENOENT, EACCES). */
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
}

/** Run `cmd args...`; resolves (never rejects) once the child has exited. */
export function exec(cmd: string, args: readonly string[], o: ExecOptions = {}): Promise<ExecOutput> {
  const command = [cmd, ...args].join(' ');
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { cwd: o.cwd, env: o.env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    const out: Buffer[] = [];
    const errs: Buffer[] = [];
    const split = (chunks: Buffer[]) => {
      let pending = '';
      return (d: Buffer): void => {
        chunks.push(d);
        if (o.onLine === undefined) return;
        pending += d.toString('utf8');
        const lines = pending.split('\n');
        pending = lines.pop() ?? '';
        for (const line of lines) o.onLine(line);
      };
    };
    child.stdout.on('data', split(out));
    child.stderr.on('data', split(errs));
    const kill = (): void => {
      if (child.pid !== undefined) {
        try {
          process.kill(-child.pid, 'SIGKILL');
        } catch {
          /* already gone */
        }
      }
    };
    if (o.signal?.aborted) kill();
    o.signal?.addEventListener('abort', kill, { once: true });
    let spawnError: string | undefined;
    child.once('error', (e) => {
      spawnError = e.message;
    });
    child.once('close', (code, signal) => {
      o.signal?.removeEventListener('abort', kill);
      const result: ExecOutput = { code, signal, stdout: Buffer.concat(out).toString('utf8'), stderr: Buffer.concat(errs).toString('utf8'), command };
      if (spawnError !== undefined) result.spawnError = spawnError;
      resolve(result);
    });
  });
}

/** The last `n` lines of a text. */
export function tail(text: string, n = 30): string {
  return text.trimEnd().split('\n').slice(-n).join('\n');
}
