import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { networkInterfaces, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { createServer, type Server } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compareStdout, extractCode, probeSandbox, runCode, SandboxUnavailableError, scoreCode } from '../lib/eval/code-sandbox.ts';

const SUM = { tests: [{ type: 'stdin' as const, input: '2 3\n', output: '5\n' }, { type: 'stdin' as const, input: '10 -4\n', output: '6' }] };
const FAST = { timeLimitMs: 1500, memoryBytes: 256 * 1024 * 1024 };

describe('extractCode', () => {
  it('takes the last closed python or unnamed block', () => {
    const reply = 'First try:\n```python\nprint(1)\n```\nBetter:\n```\nprint(2)\n```\nDone.';
    expect(extractCode(reply)).toBe('print(2)\n');
    expect(extractCode('```py\nx = 1\n```\n```cpp\nint main(){}\n```')).toBe('x = 1\n');
    expect(extractCode('```python\nprint(1)\n')).toBeNull(); // cut off, never closed
    expect(extractCode('no code')).toBeNull();
    expect(extractCode('<think>```python\nprint(1)\n```</think>only words')).toBeNull();
  });
});

describe('compareStdout', () => {
  it('ignores trailing whitespace and compares numbers by value', () => {
    expect(compareStdout('5  \n\n', '5')).toBeNull();
    expect(compareStdout('1.0 2\n', '1 2.00\n')).toBeNull();
    expect(compareStdout('5\n', '6\n')).toBe('line 1: expected "6", got "5"');
    expect(compareStdout('5\n6\n', '5\n')).toBe('expected 1 lines, got 2');
  });
});

describe('runCode', () => {
  it('passes a correct stdin solution, reading stdin any way it likes', async () => {
    const viaSys = await runCode('import sys\na, b = map(int, sys.stdin.read().split())\nprint(a + b)\n', SUM, FAST);
    expect(viaSys.verdict).toBe('passed');
    expect(viaSys.tests.map((t) => t.verdict)).toEqual(['passed', 'passed']);
    const viaFd = await runCode('a, b = map(int, open(0).read().split())\nprint(a + b)\n', SUM, FAST);
    expect(viaFd.passed).toBe(true);
  });

  it('fails a wrong solution and stops at the first failing test', async () => {
    const r = await runCode('a, b = map(int, input().split())\nprint(a * b if a == 10 else a + b)\n', SUM, FAST);
    expect(r.passed).toBe(false);
    expect(r.tests.map((t) => t.verdict)).toEqual(['passed', 'wrong-answer']);
    expect(r.tests[1]!.detail).toBe('line 1: expected "6", got "-40"');
  });

  it('reports a crash as a runtime error with the traceback', async () => {
    const r = await runCode('raise ValueError("boom")\n', SUM, FAST);
    expect(r.verdict).toBe('runtime-error');
    expect(r.tests[0]!.detail).toContain('ValueError: boom');
  });

  it('kills an infinite loop and every process it started at the time limit', async () => {
    const marker = `60.1${process.pid}`; // a sleep duration unique to this test run
    const code = `import subprocess\np = subprocess.Popen(["/bin/sleep", "${marker}"])\nwhile True:\n    pass\n`;
    // No clock bound: the loop never ends by itself, so only the time limit can produce this verdict.
    const r = await runCode(code, SUM, FAST);
    expect(r.verdict).toBe('time-limit');
    expect(r.passed).toBe(false);
    await new Promise((res) => setTimeout(res, 200));
    const left = readdirSync('/proc').filter((d) => /^\d+$/.test(d)).filter((d) => {
      try {
        return readFileSync(`/proc/${d}/cmdline`, 'utf8').includes(marker) && readFileSync(`/proc/${d}/stat`, 'utf8').replace(/^.*\) /s, '')[0] !== 'Z';
      } catch {
        return false;
      }
    });
    expect(left).toEqual([]);
  });

  it('stops a memory hog at the memory limit', async () => {
    // 5 s: filling 256 MB takes over a second on a loaded two-core machine.
    const r = await runCode('xs = []\nwhile True:\n    xs.append(bytearray(10 ** 7))\n', SUM, { ...FAST, timeLimitMs: 5000 });
    expect(r.verdict).toBe('memory-limit');
    expect(r.passed).toBe(false);
  });

  it('caps output', async () => {
    const r = await runCode('while True:\n    print("x" * 1000)\n', SUM, { ...FAST, outputBytes: 64 * 1024 });
    expect(r.verdict).toBe('output-limit');
  });

  it('runs functional tests through Solution().<fnName> or a top-level function', async () => {
    const q = {
      fnName: 'twoSum',
      tests: [
        { type: 'functional' as const, args: [[2, 7, 11, 15], 9], expected: [0, 1] },
        { type: 'functional' as const, args: [[3, 2, 4], 6], expected: [1, 2] },
      ],
    };
    const cls = 'class Solution:\n    def twoSum(self, nums, target):\n        print("debug output is ignored")\n        seen = {}\n        for i, x in enumerate(nums):\n            if target - x in seen:\n                return (seen[target - x], i)\n            seen[x] = i\n';
    expect((await runCode(cls, q, FAST)).verdict).toBe('passed');
    const fn = 'def twoSum(nums, target):\n    return [0, 1]\n';
    const r = await runCode(fn, q, FAST);
    expect(r.tests.map((t) => t.verdict)).toEqual(['passed', 'wrong-answer']);
    expect(r.tests[1]!.detail).toBe('expected [1,2], got [0,1]');
  });

  it('scoreCode: no code block scores zero', async () => {
    const r = await scoreCode('I would use a hash map.', SUM, FAST);
    expect(r).toMatchObject({ code: null, passed: false, verdict: 'no-code' });
  });
});

// Each probe checks from outside that the effect did not happen (not the sandbox's own report).
describe('confinement probes', () => {
  const ONE = (output: string) => ({ tests: [{ type: 'stdin' as const, input: '', output }] });
  let scratch: string;
  beforeAll(() => {
    scratch = mkdtempSync(join(tmpdir(), 'ternforge-probe-'));
  });
  afterAll(() => rmSync(scratch, { recursive: true, force: true }));

  /** Host pids of processes whose command line holds `marker`. */
  const processesWith = (marker: string): number[] =>
    readdirSync('/proc')
      .filter((d) => /^\d+$/.test(d))
      .filter((d) => {
        try {
          return readFileSync(`/proc/${d}/cmdline`, 'utf8').includes(marker);
        } catch {
          return false;
        }
      })
      .map(Number);
  const alive = (pid: number): boolean => {
    try {
      return readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /s, '')[0] !== 'Z';
    } catch {
      return false;
    }
  };

  it('records bubblewrap, its version and the unprivileged uid in every result', async () => {
    const r = await runCode('import os\nprint(os.getuid(), os.getgid())', ONE('65534 65534'), FAST);
    expect(r.passed).toBe(true);
    expect(r.sandbox.isolation).toMatchObject({ tool: 'bubblewrap', uid: 65534 });
    expect(r.sandbox.isolation.namespaces).toEqual(expect.arrayContaining(['user', 'mount', 'pid', 'network', 'ipc', 'uts']));
    if (process.getuid?.() === 0) expect(r.sandbox.isolation.hostUid).toBe(65534);
  });

  it("cannot read the host's /etc/passwd", async () => {
    const passwd = readFileSync('/etc/passwd', 'utf8');
    const r = await runCode('print(open("/etc/passwd").read(), end="")', ONE(passwd), FAST);
    expect(r.passed).toBe(false);
    expect(r.tests[0]!.detail).toMatch(/FileNotFoundError|PermissionError/);
  });

  it("cannot read the eval's answer file or anything in the repository", async () => {
    const answers = resolve('data/eval/livecodebench-style.json');
    const text = readFileSync(answers, 'utf8');
    const r = await runCode(`print(open(${JSON.stringify(answers)}).read(), end="")`, ONE(text), FAST);
    expect(r.passed).toBe(false);
    expect(r.tests[0]!.detail).toMatch(/FileNotFoundError|PermissionError/);
    const listing = await runCode(`import os\nprint(os.path.exists(${JSON.stringify(resolve('.'))}))`, ONE('False'), FAST);
    expect(listing.passed).toBe(true);
  });

  it('cannot write outside its own tmpfs', async () => {
    const targets = [join(scratch, 'written'), join(tmpdir(), `ternforge-probe-${process.pid}-written`), resolve('probe-written')];
    const code = `import os\nfor p in ${JSON.stringify(targets)}:\n    try:\n        os.makedirs(os.path.dirname(p), exist_ok=True)\n        open(p, "w").write("x")\n    except OSError as e:\n        print(type(e).__name__)\nprint("done")`;
    for (const t of targets) rmSync(t, { force: true });
    try {
      await runCode(code, ONE('done'), FAST);
      for (const t of targets) expect(existsSync(t), t).toBe(false);
    } finally {
      for (const t of targets) rmSync(t, { force: true });
    }
  });

  it('cannot connect to a Unix socket outside', async () => {
    const path = join(scratch, 'probe.sock');
    let connections = 0;
    const server = createServer((s) => {
      connections++;
      s.end('hello\n');
    });
    await new Promise<void>((res) => server.listen(path, res));
    try {
      // Control: outside the sandbox the same program reaches the server.
      const code = `import socket\ns = socket.socket(socket.AF_UNIX)\ns.settimeout(2)\ns.connect(${JSON.stringify(path)})\nprint(s.recv(100).decode().strip())\n`;
      expect((await promisify(execFile)('python3', ['-I', '-c', code])).stdout.trim()).toBe('hello');
      expect(connections).toBe(1);
      const r = await runCode(code, ONE('hello'), FAST);
      expect(r.passed).toBe(false);
      expect(connections).toBe(1);
    } finally {
      await new Promise<void>((res) => server.close(() => res()));
    }
  });

  it('cannot kill a process outside', async () => {
    const sleeper = spawn('sleep', ['60'], { stdio: 'ignore' });
    try {
      const pid = sleeper.pid!;
      const code = `import os, signal\ntry:\n    os.kill(${pid}, signal.SIGKILL)\n    print("killed")\nexcept OSError as e:\n    print(type(e).__name__)\n`;
      await runCode(code, ONE('killed'), FAST);
      await new Promise((res) => setTimeout(res, 200));
      expect(alive(pid)).toBe(true);
      expect(sleeper.exitCode).toBeNull();
      expect(sleeper.signalCode).toBeNull();
    } finally {
      sleeper.kill('SIGKILL');
    }
  });

  it('stops a fork bomb at its process limit, and no process of it survives', async () => {
    const marker = `30.2${process.pid}`; // a sleep duration unique to this test run
    const code = `import os, sys, time\nmade = 0\nfor i in range(1000):\n    try:\n        if os.fork() == 0:\n            os.execv("/bin/sleep", ["/bin/sleep", "${marker}"])\n        made += 1\n    except OSError:\n        break\nprint(made, file=sys.stderr)\nprint(made)\n`;
    let peak = 0;
    const sampler = setInterval(() => (peak = Math.max(peak, processesWith(marker).length)), 20);
    const r = await runCode(code, ONE('1000'), { ...FAST, timeLimitMs: 3000 });
    clearInterval(sampler);
    expect(r.passed).toBe(false);
    const made = Number(/got "(\d+)"/.exec(r.tests[0]!.detail ?? '')?.[1]);
    expect(made).toBeGreaterThan(0);
    expect(made).toBeLessThan(100);
    expect(peak).toBeLessThan(100);
    await new Promise((res) => setTimeout(res, 200));
    expect(processesWith(marker).filter(alive)).toEqual([]);
  });

  it('a setsid child holding the output pipe neither survives nor holds the scorer', async () => {
    // The child sleeps ~40 s holding the pipe: a scorer that waited for the pipe's end would take that long.
    const HELD_MS = 40_000;
    const marker = `40.3${process.pid}`; // a sleep duration unique to this test run
    // The solution answers, leaves a new-session child with its stdout, and exits.
    const code = `import subprocess\nsubprocess.Popen(["/bin/sleep", "${marker}"], start_new_session=True)\nprint(5, flush=True)\n`;
    const started = Date.now();
    const r = await runCode(code, ONE('5'), FAST);
    expect(Date.now() - started).toBeLessThan(HELD_MS / 2);
    expect(r.passed).toBe(true);
    await new Promise((res) => setTimeout(res, 200));
    expect(processesWith(marker).filter(alive)).toEqual([]);
    // The same while the solution itself loops: killed at the time limit with every descendant.
    const looping = `import subprocess\nsubprocess.Popen(["/usr/bin/setsid", "/bin/sleep", "${marker}"])\nwhile True:\n    pass\n`;
    const t0 = Date.now();
    const r2 = await runCode(looping, ONE('5'), FAST);
    expect(r2.verdict).toBe('time-limit');
    expect(Date.now() - t0).toBeLessThan(HELD_MS / 2);
    await new Promise((res) => setTimeout(res, 200));
    expect(processesWith(marker).filter(alive)).toEqual([]);
  });

  it('an AbortSignal stops the run at once', async () => {
    const ac = new AbortController();
    setTimeout(() => ac.abort(new Error('cancelled by the test')), 300);
    // Without the abort the time limit would end it, at LIMIT_MS: well before that is "at once".
    const LIMIT_MS = 30_000;
    const t0 = Date.now();
    await expect(runCode('import time\ntime.sleep(60)\n', ONE('x'), { ...FAST, timeLimitMs: LIMIT_MS, signal: ac.signal })).rejects.toThrow('cancelled by the test');
    expect(Date.now() - t0).toBeLessThan(LIMIT_MS / 2);
  });

  describe('network', () => {
    let server: Server;
    let port: number;
    let connections = 0;
    beforeAll(async () => {
      server = createServer((s) => {
        connections++;
        s.end('hello\n');
      });
      await new Promise<void>((res) => server.listen(0, '127.0.0.1', res));
      port = (server.address() as { port: number }).port;
    });
    afterAll(() => new Promise<void>((res) => server.close(() => res())));

    it('TCP to 127.0.0.1 reaches nothing outside', async () => {
      const code = `import socket\ns = socket.create_connection(("127.0.0.1", ${port}), timeout=2)\nprint(s.recv(100).decode().strip())\n`;
      // Control: outside the sandbox the same program reaches the server.
      expect((await promisify(execFile)('python3', ['-I', '-c', code])).stdout.trim()).toBe('hello');
      expect(connections).toBe(1);
      const r = await runCode(code, ONE('hello'), FAST);
      expect(r.passed).toBe(false);
      expect(r.tests[0]!.detail).toMatch(/ConnectionRefused|unreachable|OSError/i);
      expect(connections).toBe(1);
    });

    it("sees only loopback: no other interface, and the host's own non-loopback address is unreachable", async () => {
      const external = Object.values(networkInterfaces()).flat().find((a) => a !== undefined && a.family === 'IPv4' && !a.internal)?.address;
      expect(external, 'this machine has no non-loopback IPv4 address to test against').toBeDefined();
      const wide = createServer((s) => {
        s.on('error', () => undefined); // the control closes without reading
        s.end('hello\n');
      });
      let reached = 0;
      wide.on('connection', () => reached++);
      await new Promise<void>((res) => wide.listen(0, '0.0.0.0', res));
      try {
        const widePort = (wide.address() as { port: number }).port;
        const code = `import socket\nprint(sorted(n for _, n in socket.if_nameindex()))\ntry:\n    socket.create_connection((${JSON.stringify(external)}, ${widePort}), timeout=3)\n    print("connected")\nexcept OSError:\n    print("unreachable")\n`;
        // Control: outside, the same program sees more than loopback and connects.
        const outside = (await promisify(execFile)('python3', ['-I', '-c', code])).stdout.trim().split('\n');
        expect(outside[0]).not.toBe("['lo']");
        expect(outside[1]).toBe('connected');
        expect(reached).toBe(1);
        const r = await runCode(code, ONE("['lo']\nunreachable"), FAST);
        expect(r.tests[0]!.detail ?? null).toBeNull();
        expect(r.passed).toBe(true);
        expect(reached).toBe(1);
      } finally {
        await new Promise<void>((res) => wide.close(() => res()));
      }
    });
  });

  it('fails loudly, never unconfined, when bwrap is missing', async () => {
    const saved = process.env['PATH'];
    process.env['PATH'] = scratch; // no bwrap here
    try {
      await expect(probeSandbox('python3-probe-missing-bwrap')).rejects.toThrow(SandboxUnavailableError);
      await expect(probeSandbox('python3-probe-missing-bwrap')).rejects.toThrow(/bubblewrap/);
    } finally {
      process.env['PATH'] = saved;
    }
  });
});
