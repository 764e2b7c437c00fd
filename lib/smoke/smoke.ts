/**
 * smoke-serve's outer half: prepares a writable hard-link copy of the submission (serve.sh installs
 * its .packages beside itself; the committed outputs stay untouched), a clean environment (PATH, HOME and
 * TMPDIR in a scratch dir, a free PORT, no PYTHONPATH), and runs lib/smoke/runner.ts inside a network
 * namespace with only loopback up when permitted. Whatever happens (abort included), the runner's and
 * the server's process groups are ended before this returns.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { homedir, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { err, ok, type Result } from '../../engine/result.ts';
import type { SmokeReport } from '../../schemas/generated/smoke-report.ts';
import { exec } from '../submission/exec.ts';
import { withPlaceholders } from '../../engine/host-paths.ts';
import { linkOrCopy, listFiles } from '../../engine/files.ts';
import type { RunnerConfig, RunnerResult } from './runner.ts';
import { RUNNER_PGID_FILE, SERVER_PGID_FILE } from './scratch.ts';

export interface SmokeOptions {
  /** The emitted submission directory (read-only use). */
  submission: string;
  /** An empty scratch directory: the copy, HOME, TMPDIR, logs. */
  scratch: string;
  maxTokens: number;
  concurrency: number;
  deadlineS: number;
  startupLimitS: number;
  requireStop: boolean;
  namespace: 'auto' | 'required' | 'off';
  /** Directory put first on the clean PATH (where serve.sh finds python3). */
  pythonDir?: string;
  signal?: AbortSignal;
  log?: (line: string) => void;
}

/** A free TCP port on loopback (inside a fresh namespace every port is free; this one is also free here). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

/** Whether a network namespace with loopback can be made here; the reason when not. */
export async function namespaceSupport(): Promise<{ ok: true } | { ok: false; reason: string }> {
  const r = await exec('unshare', ['--net', '--', 'ip', 'link', 'set', 'lo', 'up']);
  if (r.spawnError !== undefined) return { ok: false, reason: `unshare cannot be run: ${r.spawnError}` };
  if (r.code !== 0) return { ok: false, reason: `unshare --net failed (exit ${r.code}): ${r.stderr.trim() || 'no message'}` };
  return { ok: true };
}

/** The PATH serve.sh gets: the interpreter's directory, then the system directories. */
export function cleanPath(pythonDir?: string): string {
  const system = ['/usr/local/sbin', '/usr/local/bin', '/usr/sbin', '/usr/bin', '/sbin', '/bin'];
  return [...(pythonDir !== undefined ? [pythonDir] : []), ...system].join(':');
}

/** The base interpreter directory of a venv (its pyvenv.cfg `home`), so a clean PATH needs no pyenv shims. */
export function venvBaseDir(venvPython: string): string | undefined {
  const cfg = join(dirname(dirname(venvPython)), 'pyvenv.cfg');
  if (!existsSync(cfg)) return undefined;
  return /^home\s*=\s*(.+)$/m.exec(readFileSync(cfg, 'utf8'))?.[1]?.trim();
}

/**
 * The places of this machine a stage's evidence writes as names (engine/host-paths.ts `withPlaceholders`):
 * its scratch directory `<scratch>`, the interpreter's directory `<python>`, the venv `<venv>`, the workdir
 * `<workdir>`, the repository `.`, home `~`, temp `<tmp>`.
 */
export function evidencePlaces(o: { scratch: string; python: string; pythonDir?: string | undefined; workdir: string; root: string }): Array<[string, string]> {
  const pythonDir = o.pythonDir ?? venvBaseDir(o.python);
  return [[o.scratch, '<scratch>'], ...(pythonDir !== undefined ? [[pythonDir, '<python>'] as [string, string]] : []), [dirname(dirname(o.python)), '<venv>'], [o.workdir, '<workdir>'], [o.root, '.'], [homedir(), '~'], [tmpdir(), '<tmp>']];
}

/**
 * The environment as smoke.json records it: the same variables, with the scratch directory written
 * `<scratch>` and the interpreter's directory `<python>`, so the record holds no path of this machine.
 */
export function recordedEnvironment(env: Record<string, string>, scratch: string, pythonDir?: string): Record<string, string> {
  const places: Array<[string, string]> = [[scratch, '<scratch>'], ...(pythonDir !== undefined ? [[pythonDir, '<python>'] as [string, string]] : [])];
  return Object.fromEntries(Object.entries(env).map(([k, v]) => [k, withPlaceholders(v, places)]));
}

function killGroup(pgid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(-pgid, sig);
  } catch {
    /* gone */
  }
}

/**
 * Run the smoke test. A failing server is a report with failed gates; an error is only a test that
 * could not be set up or whose runner died (the message says why).
 */
export async function runSmoke(o: SmokeOptions): Promise<Result<SmokeReport, string>> {
  const copy = join(o.scratch, 'submission');
  const home = join(o.scratch, 'home');
  const tmp = join(o.scratch, 'tmp');
  for (const d of [copy, home, tmp]) mkdirSync(d, { recursive: true });
  const before = listFiles(o.submission);
  for (const f of before) {
    mkdirSync(dirname(join(copy, f)), { recursive: true });
    linkOrCopy(join(o.submission, f), join(copy, f));
  }
  const port = await freePort();
  const env: Record<string, string> = {
    PATH: cleanPath(o.pythonDir),
    HOME: home,
    TMPDIR: tmp,
    LANG: 'C.UTF-8',
    PORT: String(port),
    TERNFORGE_STARTUP_REPORT: join(o.scratch, 'startup-report.json'),
  };
  const config: RunnerConfig = {
    dir: copy,
    port,
    env,
    startupLimitS: o.startupLimitS,
    deadlineS: o.deadlineS,
    maxTokens: o.maxTokens,
    concurrency: o.concurrency,
    requireStop: o.requireStop,
    logPath: join(o.scratch, 'serve.log'),
    pgidPath: join(o.scratch, SERVER_PGID_FILE),
    resultPath: join(o.scratch, 'runner-result.json'),
    startupReportPath: env.TERNFORGE_STARTUP_REPORT!,
  };
  const configPath = join(o.scratch, 'runner-config.json');
  writeFileSync(configPath, JSON.stringify(config, null, 2));

  let isolation: SmokeReport['isolation'];
  if (o.namespace === 'off') isolation = { network_namespace: false, reason: 'network_namespace: off in the profile' };
  else {
    const ns = await namespaceSupport();
    if (ns.ok) isolation = { network_namespace: true, method: "unshare --net; ip link set lo up (loopback only)" };
    else if (o.namespace === 'required') return err(`a network namespace is required but ${ns.reason}`);
    else isolation = { network_namespace: false, reason: ns.reason };
  }

  const runner = fileURLToPath(new URL('./runner.ts', import.meta.url));
  const tsx = fileURLToPath(import.meta.resolve('tsx/esm'));
  const node = [process.execPath, '--import', tsx, runner, configPath];
  const [cmd, ...args] = isolation.network_namespace ? ['unshare', '--net', '--', 'bash', '-c', 'ip link set lo up && exec "$@"', 'smoke', ...node] : node;
  o.log?.(`serve.sh on port ${port} from ${copy}${isolation.network_namespace ? ' inside a network namespace (loopback only)' : ` without a network namespace: ${isolation.reason}`}`);

  // The runner through zx (lib/submission/exec.ts, its own process group; an abort kills that group).
  let runnerPid: number | undefined;
  const runnerOut: string[] = [];
  // serve.sh's group, which the runner started and recorded (a group of its own, so killed by name here).
  const endServer = (): void => {
    if (existsSync(config.pgidPath)) killGroup(Number(readFileSync(config.pgidPath, 'utf8')), 'SIGKILL');
  };
  o.signal?.addEventListener('abort', endServer, { once: true });
  const ran = await exec(cmd!, args, {
    env: { PATH: process.env.PATH ?? cleanPath(), HOME: home },
    ...(o.signal !== undefined ? { signal: o.signal } : {}),
    // Recorded for the next run, should this process be SIGKILLed (lib/smoke/scratch.ts).
    onSpawn: (pid) => {
      runnerPid = pid;
      writeFileSync(join(o.scratch, RUNNER_PGID_FILE), String(pid));
    },
    onLine: (line) => runnerOut.push(`${line}\n`),
  });
  o.signal?.removeEventListener('abort', endServer);
  // Anything left, always.
  endServer();
  if (runnerPid !== undefined) killGroup(runnerPid, 'SIGKILL');
  const code = ran.spawnError ?? ran.code ?? ran.signal;

  // Aborted is never a report: killing serve.sh's group first can let the runner write one ("server exited")
  // before its own group is killed.
  if (o.signal?.aborted) return err(`the smoke run was aborted (the runner exited with ${code})`);
  if (!existsSync(config.resultPath)) return err(`the smoke runner exited with ${code} and wrote no result:\n${runnerOut.join('').slice(-3000)}`);
  const r = JSON.parse(readFileSync(config.resultPath, 'utf8')) as RunnerResult;
  const had = new Set(before);
  const dirs = new Set(before.flatMap((f) => f.split('/').slice(0, -1).map((_, i, parts) => parts.slice(0, i + 1).join('/'))));
  const wrote = new Set<string>();
  for (const f of listFiles(copy)) {
    if (had.has(f)) continue;
    const parts = f.split('/');
    let i = 1;
    while (i < parts.length && dirs.has(parts.slice(0, i).join('/'))) i++;
    wrote.add(parts.slice(0, i).join('/'));
  }
  r.server.wrote_into_submission = [...wrote].sort();
  return ok({
    format: 'ternforge-smoke/1',
    ...r,
    isolation,
    environment: recordedEnvironment(env, o.scratch, o.pythonDir),
    params: { max_tokens: o.maxTokens, concurrency: o.concurrency, deadline_s: o.deadlineS, startup_limit_s: o.startupLimitS, require_stop: o.requireStop },
  });
}
