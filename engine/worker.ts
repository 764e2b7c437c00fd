/**
 * StageContext.worker: run `<python> -m ternforge <command> --config <file.json>` with
 * PYTHONPATH=<root>/python. Stdout (JSON-lines events) and stderr (log) are drained concurrently;
 * `progress` events are shown on stderr: rewritten in place on a terminal, else (a log file, CI) as a line at
 * most every PROGRESS_LOG_MS and at each total's end, with `loss` events likewise. Abort kills the child (SIGTERM, then
 * SIGKILL after 5 s). A non-zero exit is `worker-failed` with the exit code or signal and the last
 * 40 lines of stderr (200 behind a launcher: several processes share stderr, and the launcher's own summary
 * comes last).
 */
import { spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { Failure } from './failure.ts';
import { randomSuffix, writeFileAtomicSync } from './fs-atomic.ts';
import { err, ok, type Result } from './result.ts';
import type { WorkerEvent } from './types.ts';

/** Lines of stderr kept for a failure report. */
export const STDERR_TAIL_LINES = 40;
/** The same behind a launcher. */
export const LAUNCHED_STDERR_TAIL_LINES = 200;
/** How often progress is logged as a line when stderr is not a terminal. */
export const PROGRESS_LOG_MS = 30_000;

export interface WorkerOptions {
  stage: string;
  python: string;
  root: string;
  /** Where the config file is written (removed afterwards). */
  tmpDir: string;
  signal: AbortSignal;
  log(line: string): void;
}

export async function runWorker(opts: WorkerOptions, command: string, config: unknown, launcher: readonly string[] = []): Promise<Result<WorkerEvent[], Failure>> {
  const configPath = join(opts.tmpDir, `worker-${opts.stage}-${randomSuffix()}.json`);
  writeFileAtomicSync(configPath, JSON.stringify(config));
  const argv = [...launcher, '-m', 'ternforge', command, '--config', configPath];
  const tailLines = launcher.length > 0 ? LAUNCHED_STDERR_TAIL_LINES : STDERR_TAIL_LINES;
  const shown = `${opts.python} ${argv.join(' ')}`;
  try {
    const child = spawn(opts.python, argv, {
      cwd: opts.root,
      env: { ...process.env, PYTHONPATH: [join(opts.root, 'python'), process.env.PYTHONPATH].filter(Boolean).join(':'), PYTHONUNBUFFERED: '1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const events: WorkerEvent[] = [];
    const tail: string[] = [];
    const tty = process.stderr.isTTY;
    let lastLogged = Date.now();
    const logProgress = (e: WorkerEvent): void => {
      const line = e.event === 'progress'
        ? `${String(e.what ?? command)} ${String(e.done)}/${String(e.total)}`
        : Object.entries(e).filter(([k]) => k !== 'event').map(([k, v]) => `${k} ${typeof v === 'number' && !Number.isInteger(v) ? v.toFixed(4) : String(v)}`).join(', ');
      if (tty && e.event === 'progress') {
        process.stderr.write(`\r[${opts.stage}] ${line}   `);
      } else if (!tty && (Date.now() - lastLogged >= PROGRESS_LOG_MS || (e.event === 'progress' && e.done === e.total))) {
        lastLogged = Date.now();
        opts.log(`${e.event}: ${line}`);
      }
    };
    let killTimer: NodeJS.Timeout | undefined;
    const onAbort = (): void => {
      child.kill('SIGTERM');
      killTimer = setTimeout(() => child.kill('SIGKILL'), 5000);
      killTimer.unref();
    };
    if (opts.signal.aborted) onAbort();
    else opts.signal.addEventListener('abort', onAbort, { once: true });

    const stdoutDone = new Promise<void>((resolve) => {
      createInterface({ input: child.stdout }).on('line', (line) => {
        let ev: unknown;
        try {
          ev = JSON.parse(line);
        } catch {
          ev = undefined;
        }
        if (ev !== null && typeof ev === 'object' && typeof (ev as WorkerEvent).event === 'string') {
          const e = ev as WorkerEvent;
          events.push(e);
          if (e.event === 'progress' || e.event === 'loss') logProgress(e);
        } else {
          opts.log(`(stdout, not an event) ${line}`);
        }
      }).on('close', resolve);
    });
    const stderrDone = new Promise<void>((resolve) => {
      createInterface({ input: child.stderr }).on('line', (line) => {
        tail.push(line);
        if (tail.length > tailLines) tail.shift();
        opts.log(line);
      }).on('close', resolve);
    });
    const exit = await new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve, reject) => {
      child.once('error', reject);
      child.once('close', (code, signal) => resolve({ code, signal }));
    }).catch((e: Error) => ({ code: null, signal: null, spawnError: e.message }));
    await Promise.all([stdoutDone, stderrDone]);
    if (killTimer !== undefined) clearTimeout(killTimer);
    opts.signal.removeEventListener('abort', onAbort);
    if (tty && events.some((e) => e.event === 'progress')) process.stderr.write('\n');
    if ('spawnError' in exit) {
      return err({ reason: 'worker-failed', stage: opts.stage, command: shown, exitCode: null, signal: null, stderrTail: String(exit.spawnError) });
    }
    if (exit.code !== 0) {
      return err({ reason: 'worker-failed', stage: opts.stage, command: shown, exitCode: exit.code, signal: exit.signal, stderrTail: tail.join('\n') });
    }
    return ok(events);
  } finally {
    rmSync(configPath, { force: true });
  }
}
