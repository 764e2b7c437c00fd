/**
 * LiveCodeBench scoring: the last fenced Python block of a reply, run against the question's tests in
 * a sandboxed subprocess, one process per test, stopping at the first failure.
 *
 * The sandbox, per test run:
 * - a fresh temporary directory as the working directory (removed afterwards), a minimal environment,
 *   and `python -I` (isolated mode: no user site, no PYTHON* variables, no script dir on sys.path);
 * - a bootstrap that sets rlimits before the solution runs (and, as LiveCodeBench does, puts `typing`,
 *   `collections` and the usual modules in scope): address space (memory), CPU seconds, file
 *   size, no core dumps; a `MemoryError` ends the run with a dedicated exit code;
 * - a wall-clock limit enforced from here by killing the whole process group (spawned detached);
 * - a cap on captured stdout (the run is killed beyond it);
 * - no network, via `unshare -rn` (a new user and network namespace with only a downed loopback) when
 *   the kernel allows it. Availability is probed at run time and recorded in every result, so a report
 *   says whether its code ran isolated.
 *
 * Stdin tests compare output line by line with trailing whitespace ignored and numeric tokens compared by
 * value (as LiveCodeBench does); functional tests call `Solution().<fnName>(*args)` (or a top-level
 * `<fnName>`) and compare the returned value as JSON.
 */
import { spawn, execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { FunctionalTest, StdinTest } from '../../schemas/generated/eval-question.ts';
import { answerText } from './content.ts';

const execFileP = promisify(execFile);

/** How one test run ended. */
export type Verdict = 'passed' | 'wrong-answer' | 'runtime-error' | 'time-limit' | 'memory-limit' | 'output-limit';

/** Whether the code ran without network: `unshare` = in its own empty network namespace. */
export type NetworkIsolation = 'unshare' | 'none';

export interface SandboxOptions {
  /** Python interpreter (resolved to its real executable once). Default `python3`. */
  python?: string;
  /** Wall-clock limit per test run, in ms. Default 6000 (LiveCodeBench's per-test limit). */
  timeLimitMs?: number;
  /** Address-space limit per test run, in bytes. Default 1 GiB. */
  memoryBytes?: number;
  /** Cap on captured stdout per test run, in bytes. Default 1 MiB. */
  outputBytes?: number;
}

/** The resolved sandbox: what every result records. */
export interface SandboxInfo {
  /** The real interpreter path used. */
  readonly python: string;
  readonly pythonVersion: string;
  readonly network: NetworkIsolation;
  readonly timeLimitMs: number;
  readonly memoryBytes: number;
  readonly outputBytes: number;
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

const probes = new Map<string, Promise<{ python: string; version: string; network: NetworkIsolation }>>();

/** Resolve the interpreter and find out once whether `unshare -rn` works here. */
export function probeSandbox(python = 'python3'): Promise<{ python: string; version: string; network: NetworkIsolation }> {
  let p = probes.get(python);
  if (p === undefined) {
    p = (async () => {
      const { stdout } = await execFileP(python, ['-I', '-c', 'import sys, platform; print(sys.executable); print(platform.python_version())']);
      const [exe, version] = stdout.trim().split('\n') as [string, string];
      let network: NetworkIsolation = 'none';
      try {
        await execFileP('unshare', ['-rn', exe, '-I', '-c', 'pass'], { timeout: 10_000 });
        network = 'unshare';
      } catch {
        network = 'none';
      }
      return { python: exe, version, network };
    })();
    probes.set(python, p);
  }
  return p;
}

/** The sandbox these options give on this machine (probed once per interpreter). */
export async function sandboxInfo(opts: SandboxOptions = {}): Promise<SandboxInfo> {
  const probe = await probeSandbox(opts.python ?? 'python3');
  return {
    python: probe.python,
    pythonVersion: probe.version,
    network: probe.network,
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

function runOnce(info: SandboxInfo, dir: string, cfg: Record<string, unknown>, stdin: string): Promise<RawRun> {
  const args = ['-I', join(dir, 'bootstrap.py'), JSON.stringify(cfg)];
  const [cmd, argv] = info.network === 'unshare' ? ['unshare', ['-rn', info.python, ...args]] : [info.python, args];
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const child = spawn(cmd, argv, {
      cwd: dir,
      detached: true,
      stdio: ['pipe', 'pipe', 'pipe'],
      env: { PATH: '/usr/local/bin:/usr/bin:/bin', LANG: 'C.UTF-8', HOME: dir, TMPDIR: dir, PYTHONHASHSEED: '0' },
    });
    const out: Buffer[] = [];
    let outBytes = 0;
    let err = '';
    let timedOut = false;
    let outputExceeded = false;
    const killGroup = (): void => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    };
    const timer = setTimeout(() => {
      timedOut = true;
      killGroup();
    }, info.timeLimitMs);
    child.stdout.on('data', (b: Buffer) => {
      outBytes += b.length;
      if (outBytes > info.outputBytes) {
        if (!outputExceeded) {
          outputExceeded = true;
          killGroup();
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
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on('exit', () => killGroup()); // leftover grandchildren go with it
    child.on('close', (exitCode, signal) => {
      clearTimeout(timer);
      resolve({
        exitCode,
        signal,
        stdout: Buffer.concat(out).toString('utf8'),
        stderr: err,
        timedOut,
        outputExceeded,
        wallMs: performance.now() - started,
      });
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

async function runTest(info: SandboxInfo, dir: string, test: StdinTest | FunctionalTest, fnName: string | undefined, index: number): Promise<TestResult> {
  const cfg = {
    mode: test.type,
    fnName: fnName ?? '',
    memoryBytes: info.memoryBytes,
    cpuSeconds: Math.ceil(info.timeLimitMs / 1000) + 1,
    fileBytes: 16 * 1024 * 1024,
  };
  if (test.type === 'functional') await writeFile(join(dir, 'args.json'), JSON.stringify(test.args));
  const run = await runOnce(info, dir, cfg, test.type === 'stdin' ? test.input : '');
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
  const results: TestResult[] = [];
  for (const [index, test] of question.tests.entries()) {
    const dir = await mkdtemp(join(tmpdir(), 'ternforge-sandbox-'));
    try {
      await writeFile(join(dir, 'bootstrap.py'), BOOTSTRAP);
      await writeFile(join(dir, 'solution.py'), code);
      const r = await runTest(info, dir, test, question.fnName, index);
      results.push(r);
      if (r.verdict !== 'passed') return { passed: false, verdict: r.verdict, tests: results, sandbox: info };
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }
  return { passed: true, verdict: 'passed', tests: results, sandbox: info };
}

/** Score one reply: extract the last Python block and run it; no block scores zero. */
export async function scoreCode(content: string | null, question: CodeTests, opts: SandboxOptions = {}): Promise<CodeResult & { code: string | null }> {
  const code = extractCode(content);
  if (code === null) return { code, passed: false, verdict: 'no-code', tests: [], sandbox: await sandboxInfo(opts) };
  return { code, ...(await runCode(code, question, opts)) };
}
