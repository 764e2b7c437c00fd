/**
 * LiveCodeBench scoring: the last fenced Python block of a reply, run against the question's tests in
 * a sandboxed subprocess, one process per test, stopping at the first failure.
 *
 * The sandbox, per test run, is bubblewrap (Debian package `bubblewrap`, `bwrap`); there is no
 * unsandboxed fallback: a missing `bwrap`, or a kernel that refuses the namespaces, fails the run with
 * that reason.
 * - its own user, mount, PID, network, IPC, UTS (and, where possible, cgroup) namespaces
 *   (`--unshare-all`), a new session (`--new-session`: no terminal to inject input into) and
 *   `--die-with-parent`;
 * - the code runs as uid/gid 65534 inside; when this process is root, bwrap itself is started as
 *   uid/gid 65534 with no capabilities (`setpriv`), so nothing in the sandbox holds host root;
 * - the filesystem it sees: `/usr` read-only (and `/bin`, `/lib*` as its symlinks), a fresh `/proc` of
 *   its own PID namespace, a minimal `/dev`, and size-capped tmpfs `/work` (its working directory, into
 *   which the solution and a bootstrap are copied) and `/tmp`. No `/etc`, no home, no repository, no
 *   eval data: the interpreter must live under `/usr` (or its prefix is bound read-only);
 * - a bootstrap that sets rlimits before the solution runs (and, as LiveCodeBench does, puts `typing`,
 *   `collections` and the usual modules in scope): address space (memory), CPU seconds, file size,
 *   processes, open files, no core dumps; a `MemoryError` ends the run with a dedicated exit code;
 * - a wall-clock limit (and the caller's AbortSignal) enforced from here by killing bwrap: the sandbox's
 *   PID 1 dies with it (`--die-with-parent`) and the kernel kills every process of the PID namespace
 *   with its init, `setsid` or not. The result does not wait for output pipes held by anything else;
 * - a cap on captured stdout (the run is killed beyond it);
 * - no network: the network namespace holds only a loopback of its own.
 *
 * Stdin tests compare output line by line with trailing whitespace ignored and numeric tokens compared by
 * value (as LiveCodeBench does); functional tests call `Solution().<fnName>(*args)` (or a top-level
 * `<fnName>`) and compare the returned value as JSON.
 */
import { spawn, execFile } from 'node:child_process';
import { existsSync, lstatSync, realpathSync } from 'node:fs';
import { promisify } from 'node:util';
import type { FunctionalTest, StdinTest } from '../../schemas/generated/eval-question.ts';
import { answerText } from './content.ts';

const execFileP = promisify(execFile);

/** How one test run ended. */
export type Verdict = 'passed' | 'wrong-answer' | 'runtime-error' | 'time-limit' | 'memory-limit' | 'output-limit';

export interface SandboxOptions {
  /** Python interpreter, as named inside the sandbox (its PATH is `/usr/bin:/bin`). Default `python3`. */
  python?: string;
  /** Wall-clock limit per test run, in ms. Default 6000 (LiveCodeBench's per-test limit). */
  timeLimitMs?: number;
  /** Address-space limit per test run, in bytes. Default 1 GiB. */
  memoryBytes?: number;
  /** Cap on captured stdout per test run, in bytes. Default 1 MiB. */
  outputBytes?: number;
  /** Cancels the run: the sandbox is killed and `runCode` rejects with the signal's reason. */
  signal?: AbortSignal;
}

/** What a code question's scorer needs: its tests and, for functional tests, the function's name. */
export interface CodeTests {
  readonly tests: ReadonlyArray<StdinTest | FunctionalTest>;
  readonly fnName?: string;
}

export interface TestResult {
  /** Index of the test in the question. */
  readonly index: number;
  readonly verdict: Verdict;
  readonly wallMs: number;
  /** Last lines of stderr (runtime errors) or the first differing line (wrong answers). */
  readonly detail?: string;
}

export interface CodeResult {
  /** Every test passed. */
  readonly passed: boolean;
  /** `no-code` when the reply had no Python block; otherwise the first failing test's verdict. */
  readonly verdict: Verdict | 'no-code';
  /** Tests run, in order, up to and including the first failure. */
  readonly tests: TestResult[];
  readonly sandbox: SandboxInfo;
}

/** The uid/gid of the code inside the sandbox (and of bwrap on the host when we are root): `nobody`. */
const SANDBOX_UID = 65534;
const PROCESSES = 64;
const OPEN_FILES = 64;
const FILE_BYTES = 16 * 1024 * 1024;
const TMPFS_BYTES = 64 * 1024 * 1024;
const NAMESPACES = ['user', 'mount', 'pid', 'network', 'ipc', 'uts', 'cgroup'] as const;

const MEMORY_EXIT = 86;
const RESULT_MARK = '@@TERNFORGE-RESULT@@';

/**
 * Runs inside the sandbox: argv[1] is a JSON config. Sets the limits, then runs `solution.py` as
 * `__main__` (stdin tests) or imports it and calls the function (functional tests).
 */
const BOOTSTRAP = String.raw`
import io, json, os, resource, runpy, sys
cfg = json.loads(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (cfg["memoryBytes"], cfg["memoryBytes"]))
resource.setrlimit(resource.RLIMIT_CPU, (cfg["cpuSeconds"], cfg["cpuSeconds"] + 1))
resource.setrlimit(resource.RLIMIT_FSIZE, (cfg["fileBytes"], cfg["fileBytes"]))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
resource.setrlimit(resource.RLIMIT_NPROC, (cfg["processes"], cfg["processes"]))
resource.setrlimit(resource.RLIMIT_NOFILE, (cfg["openFiles"], cfg["openFiles"]))
sys.argv = ["solution.py"]
# As LiveCodeBench does, the usual imports are in scope (starter code uses List without importing it).
import bisect, collections, functools, heapq, itertools, math, re, string, typing
prelude = {n: getattr(typing, n) for n in typing.__all__}
prelude.update({n: getattr(collections, n) for n in collections.__all__})
prelude.update(bisect=bisect, collections=collections, functools=functools, heapq=heapq, itertools=itertools,
               math=math, re=re, string=string, sys=sys)
if cfg["mode"] == "stdin":
    try:
        runpy.run_path("solution.py", init_globals=prelude, run_name="__main__")
    except MemoryError:
        os._exit(${MEMORY_EXIT})
    sys.stdout.flush()
else:
    with open("args.json") as f:
        args = json.load(f)
    real = sys.stdout
    sys.stdout = io.StringIO()
    try:
        ns = runpy.run_path("solution.py", init_globals=prelude, run_name="solution")
        name = cfg["fnName"]
        if "Solution" in ns and hasattr(ns["Solution"], name):
            fn = getattr(ns["Solution"](), name)
        elif name in ns:
            fn = ns[name]
        else:
            raise NameError("no Solution." + name + " and no function " + name)
        result = fn(*args)
    except MemoryError:
        os._exit(${MEMORY_EXIT})
    finally:
        sys.stdout = real
    text = json.dumps(result, default=lambda o: sorted(o) if isinstance(o, (set, frozenset)) else list(o))
    real.write("\n${RESULT_MARK}" + text + "\n")
    real.flush()
`;
import type { Isolation, SandboxInfo } from '../../schemas/generated/eval-report.ts';
export type { Isolation, SandboxInfo };

// ---------------------------------------------------------------------------------------------------
// Extraction

const PYTHON_LANGS = new Set(['', 'python', 'python3', 'py']);

/** The last closed fenced block whose language is Python or unnamed; null when there is none. */
export function extractCode(content: string | null | undefined): string | null {
  const text = answerText(content);
  const re = /```[ \t]*([^\n`]*)\n([\s\S]*?)```/g;
  let last: string | null = null;
  for (let m = re.exec(text); m !== null; m = re.exec(text)) {
    if (PYTHON_LANGS.has(m[1]!.trim().toLowerCase())) last = m[2]!;
  }
  return last;
}

// ---------------------------------------------------------------------------------------------------
// Sandbox probe

/** Raised when the sandbox cannot be set up: never run model code without it. */
export class SandboxUnavailableError extends Error {
  override readonly name = 'SandboxUnavailableError';
}

interface Probe {
  readonly python: string;
  readonly version: string;
  readonly isolation: Isolation;
  /** The command line before the program: setpriv (when root) and bwrap with its mounts. */
  readonly prefix: readonly string[];
}

const probes = new Map<string, Promise<Probe>>();

/** `/bin`, `/lib`, ... as the host has them: symlinks into `/usr` are recreated, real directories bound. */
function systemMounts(): string[] {
  const args = ['--ro-bind', '/usr', '/usr'];
  for (const d of ['/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32']) {
    let st;
    try {
      st = lstatSync(d);
    } catch {
      continue;
    }
    if (st.isSymbolicLink()) args.push('--symlink', realpathSync(d).replace(/^\//, ''), d);
    else if (st.isDirectory()) args.push('--ro-bind', d, d);
  }
  return args;
}

/** The fixed part of every sandboxed command line (before the program and its per-run `--file`s). */
function commandPrefix(extraRo: readonly string[]): string[] {
  const root = process.getuid?.() === 0;
  const drop = root ? ['setpriv', `--reuid=${SANDBOX_UID}`, `--regid=${SANDBOX_UID}`, '--clear-groups', '--inh-caps=-all', '--'] : [];
  return [
    ...drop,
    'bwrap',
    '--unshare-all',
    '--die-with-parent',
    '--new-session',
    '--uid', String(SANDBOX_UID),
    '--gid', String(SANDBOX_UID),
    ...systemMounts(),
    ...extraRo.flatMap((d) => ['--ro-bind', d, d]),
    '--proc', '/proc',
    '--dev', '/dev',
    '--size', String(TMPFS_BYTES), '--tmpfs', '/tmp',
    '--size', String(TMPFS_BYTES), '--tmpfs', '/work',
    '--chdir', '/work',
    '--clearenv',
    '--setenv', 'PATH', '/usr/local/bin:/usr/bin:/bin',
    '--setenv', 'LANG', 'C.UTF-8',
    '--setenv', 'HOME', '/work',
    '--setenv', 'TMPDIR', '/tmp',
    '--setenv', 'PYTHONHASHSEED', '0',
  ];
}

/**
 * Find bwrap, check that it can create the namespaces here, and resolve the interpreter inside the
 * sandbox. Rejects with a `SandboxUnavailableError` naming the cause; never falls back to running
 * unconfined. An absolute interpreter path outside `/usr` has its installation prefix bound read-only.
 */
export function probeSandbox(python = 'python3'): Promise<Probe> {
  let p = probes.get(python);
  if (p === undefined) {
    p = (async (): Promise<Probe> => {
      let version: string;
      try {
        version = (await execFileP('bwrap', ['--version'])).stdout.trim().replace(/^bubblewrap\s*/, '');
      } catch (e) {
        throw new SandboxUnavailableError(`the code sandbox needs bubblewrap (\`bwrap\`), which could not be run: ${(e as Error).message}; install it (Debian: apt-get install bubblewrap)`);
      }
      if (process.getuid?.() === 0 && !existsSync('/usr/bin/setpriv')) throw new SandboxUnavailableError('running as root, the code sandbox needs setpriv (util-linux) to start bwrap as an unprivileged user');
      const extraRo: string[] = [];
      if (python.startsWith('/') && !python.startsWith('/usr/')) {
        const { stdout } = await execFileP(python, ['-I', '-c', 'import sys; print(sys.base_prefix)']);
        extraRo.push(stdout.trim());
      }
      const prefix = commandPrefix(extraRo);
      let stdout: string;
      try {
        ({ stdout } = await execFileP(prefix[0]!, [...prefix.slice(1), '--', python, '-I', '-c', 'import sys, platform, os; print(sys.executable); print(platform.python_version()); print(os.getuid())'], { timeout: 20_000 }));
      } catch (e) {
        const err = e as Error & { stderr?: string };
        throw new SandboxUnavailableError(`the code sandbox (bwrap ${version}) could not run ${python}: ${(err.stderr ?? '').trim() || err.message}`);
      }
      const [exe, pyVersion, uid] = stdout.trim().split('\n') as [string, string, string];
      if (Number(uid) !== SANDBOX_UID) throw new SandboxUnavailableError(`the code sandbox ran as uid ${uid}, not ${SANDBOX_UID}`);
      const isolation: Isolation = {
        tool: 'bubblewrap',
        version,
        uid: SANDBOX_UID,
        hostUid: process.getuid?.() === 0 ? SANDBOX_UID : (process.getuid?.() ?? -1),
        namespaces: [...NAMESPACES],
        processes: PROCESSES,
        openFiles: OPEN_FILES,
        fileBytes: FILE_BYTES,
        tmpfsBytes: TMPFS_BYTES,
      };
      return { python: exe, version: pyVersion, isolation, prefix };
    })();
    probes.set(python, p);
    p.catch(() => probes.delete(python)); // a failed probe is retried next time
  }
  return p;
}

/** The sandbox these options give on this machine (probed once per interpreter). */
export async function sandboxInfo(opts: SandboxOptions = {}): Promise<SandboxInfo> {
  const probe = await probeSandbox(opts.python ?? 'python3');
  return {
    python: probe.python,
    pythonVersion: probe.version,
    isolation: probe.isolation,
    timeLimitMs: opts.timeLimitMs ?? 6000,
    memoryBytes: opts.memoryBytes ?? 1024 * 1024 * 1024,
    outputBytes: opts.outputBytes ?? 1024 * 1024,
  };
}

// ---------------------------------------------------------------------------------------------------
// One run

interface RawRun {
  readonly exitCode: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
  readonly timedOut: boolean;
  readonly outputExceeded: boolean;
  readonly wallMs: number;
}

const STDERR_KEEP = 4096;
/** After bwrap exits, how long its output pipes may take to drain before the run is read as ended. */
const DRAIN_MS = 250;

/** Files copied into the sandbox's `/work` (each through its own pipe: bwrap `--file FD`). */
type WorkFiles = Readonly<Record<string, string>>;

function runOnce(prefix: readonly string[], info: SandboxInfo, files: WorkFiles, cfg: Record<string, unknown>, stdin: string, signal: AbortSignal | undefined): Promise<RawRun> {
  const names = Object.keys(files);
  const fileArgs = names.flatMap((n, i) => ['--file', String(3 + i), `/work/${n}`]);
  const argv = [...prefix.slice(1), ...fileArgs, '--', info.python, '-I', '/work/bootstrap.py', JSON.stringify(cfg)];
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const started = performance.now();
    const child = spawn(prefix[0]!, argv, { stdio: ['pipe', 'pipe', 'pipe', ...names.map(() => 'pipe' as const)] });
    const out: Buffer[] = [];
    let outBytes = 0;
    let err = '';
    let timedOut = false;
    let outputExceeded = false;
    let settled = false;
    const kill = (): void => {
      child.kill('SIGKILL'); // bwrap; the sandbox's init and every process under it die with it
    };
    const timer = setTimeout(() => {
      timedOut = true;
      kill();
    }, info.timeLimitMs);
    const onAbort = (): void => {
      kill();
      finish(() => reject(signal!.reason));
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    const finish = (f: () => void): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      child.stdout.destroy();
      child.stderr.destroy();
      f();
    };
    const done = (exitCode: number | null, sig: NodeJS.Signals | null): void =>
      finish(() =>
        resolve({
          exitCode,
          signal: sig,
          stdout: Buffer.concat(out).toString('utf8'),
          stderr: err,
          timedOut,
          outputExceeded,
          wallMs: performance.now() - started,
        }),
      );
    child.stdout.on('data', (b: Buffer) => {
      outBytes += b.length;
      if (outBytes > info.outputBytes) {
        if (!outputExceeded) {
          outputExceeded = true;
          kill();
        }
        return;
      }
      out.push(b);
    });
    child.stderr.on('data', (b: Buffer) => {
      err = (err + b.toString('utf8')).slice(-STDERR_KEEP);
    });
    child.stdin.on('error', () => {
      // the program exited without reading all of stdin: not our failure
    });
    child.on('error', (e) => finish(() => reject(e)));
    // Normally the pipes close with the exit; never wait on them for longer than a moment.
    child.on('exit', (code, sig) => setTimeout(() => done(code, sig), DRAIN_MS).unref());
    child.on('close', (code, sig) => done(code, sig));
    names.forEach((n, i) => {
      const pipe = child.stdio[3 + i] as NodeJS.WritableStream & { on(e: 'error', f: () => void): void };
      pipe.on('error', () => {
        // bwrap died before reading it: the exit reports why
      });
      pipe.end(files[n]);
    });
    child.stdin.end(stdin);
  });
}

function failureVerdict(run: RawRun): Verdict | null {
  if (run.timedOut) return 'time-limit';
  if (run.outputExceeded) return 'output-limit';
  if (run.exitCode === MEMORY_EXIT || /\bMemoryError\b/.test(run.stderr)) return 'memory-limit';
  if (run.signal === 'SIGXCPU') return 'time-limit';
  if (run.exitCode !== 0) return 'runtime-error';
  return null;
}

const tail = (s: string, n = 600): string => (s.length > n ? s.slice(-n) : s);

// ---------------------------------------------------------------------------------------------------
// Comparison

function tokensEqual(a: string, b: string): boolean {
  if (a === b) return true;
  const num = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/;
  return num.test(a) && num.test(b) && Number(a) === Number(b);
}

/** LiveCodeBench-style stdout comparison; returns the first difference, or null when equal. */
export function compareStdout(actual: string, expected: string): string | null {
  const lines = (s: string): string[] => {
    const ls = s.replace(/\r\n/g, '\n').split('\n').map((l) => l.trimEnd());
    while (ls.length > 0 && ls[ls.length - 1] === '') ls.pop();
    while (ls.length > 0 && ls[0] === '') ls.shift();
    return ls;
  };
  const a = lines(actual);
  const e = lines(expected);
  if (a.length !== e.length) return `expected ${e.length} lines, got ${a.length}`;
  for (let i = 0; i < e.length; i++) {
    if (a[i] === e[i]) continue;
    const at = a[i]!.trim().split(/\s+/);
    const et = e[i]!.trim().split(/\s+/);
    if (at.length !== et.length || at.some((t, k) => !tokensEqual(t, et[k]!))) return `line ${i + 1}: expected ${JSON.stringify(e[i])}, got ${JSON.stringify(tail(a[i]!, 200))}`;
  }
  return null;
}

function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (Array.isArray(a) && Array.isArray(b)) return a.length === b.length && a.every((x, i) => jsonEqual(x, b[i]));
  if (a !== null && b !== null && typeof a === 'object' && typeof b === 'object' && !Array.isArray(a) && !Array.isArray(b)) {
    const ka = Object.keys(a).sort();
    const kb = Object.keys(b).sort();
    return jsonEqual(ka, kb) && ka.every((k) => jsonEqual((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]));
  }
  return false;
}

// ---------------------------------------------------------------------------------------------------
// Public entry

async function runTest(probe: Probe, info: SandboxInfo, code: string, test: StdinTest | FunctionalTest, fnName: string | undefined, index: number, signal: AbortSignal | undefined): Promise<TestResult> {
  const cfg = {
    mode: test.type,
    fnName: fnName ?? '',
    memoryBytes: info.memoryBytes,
    cpuSeconds: Math.ceil(info.timeLimitMs / 1000) + 1,
    fileBytes: FILE_BYTES,
    processes: PROCESSES,
    openFiles: OPEN_FILES,
  };
  const files: Record<string, string> = { 'bootstrap.py': BOOTSTRAP, 'solution.py': code };
  if (test.type === 'functional') files['args.json'] = JSON.stringify(test.args);
  const run = await runOnce(probe.prefix, info, files, cfg, test.type === 'stdin' ? test.input : '', signal);
  const failed = failureVerdict(run);
  if (failed !== null) return { index, verdict: failed, wallMs: run.wallMs, detail: tail(run.stderr) };
  if (test.type === 'stdin') {
    const diff = compareStdout(run.stdout, test.output);
    return diff === null ? { index, verdict: 'passed', wallMs: run.wallMs } : { index, verdict: 'wrong-answer', wallMs: run.wallMs, detail: diff };
  }
  const at = run.stdout.lastIndexOf(RESULT_MARK);
  if (at < 0) return { index, verdict: 'runtime-error', wallMs: run.wallMs, detail: 'no result was returned' };
  let value: unknown;
  try {
    value = JSON.parse(run.stdout.slice(at + RESULT_MARK.length).split('\n')[0]!);
  } catch {
    return { index, verdict: 'runtime-error', wallMs: run.wallMs, detail: 'the result is not JSON' };
  }
  return jsonEqual(value, test.expected)
    ? { index, verdict: 'passed', wallMs: run.wallMs }
    : { index, verdict: 'wrong-answer', wallMs: run.wallMs, detail: `expected ${JSON.stringify(test.expected)}, got ${tail(JSON.stringify(value), 200)}` };
}

/** Run `code` against every test of `question` (stopping at the first failure). */
export async function runCode(code: string, question: CodeTests, opts: SandboxOptions = {}): Promise<CodeResult> {
  const info = await sandboxInfo(opts);
  const probe = await probeSandbox(opts.python ?? 'python3');
  const results: TestResult[] = [];
  for (const [index, test] of question.tests.entries()) {
    const r = await runTest(probe, info, code, test, question.fnName, index, opts.signal);
    results.push(r);
    if (r.verdict !== 'passed') return { passed: false, verdict: r.verdict, tests: results, sandbox: info };
  }
  return { passed: true, verdict: 'passed', tests: results, sandbox: info };
}

/** Score one reply: extract the last Python block and run it; no block scores zero. */
export async function scoreCode(content: string | null, question: CodeTests, opts: SandboxOptions = {}): Promise<CodeResult & { code: string | null }> {
  const code = extractCode(content);
  if (code === null) return { code, passed: false, verdict: 'no-code', tests: [], sandbox: await sandboxInfo(opts) };
  return { code, ...(await runCode(code, question, opts)) };
}
