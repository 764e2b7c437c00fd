import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { createServer, type Server } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compareStdout, extractCode, probeSandbox, runCode, scoreCode } from '../lib/eval/code-sandbox.ts';

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

  it('kills an infinite loop and its whole process group at the time limit', async () => {
    const code = 'import subprocess, sys\np = subprocess.Popen(["sleep", "60"])\nprint(p.pid, file=sys.stderr, flush=True)\nwhile True:\n    pass\n';
    const started = Date.now();
    const r = await runCode(code, SUM, FAST);
    expect(r.verdict).toBe('time-limit');
    expect(r.passed).toBe(false);
    expect(Date.now() - started).toBeLessThan(10_000);
    const pid = Number(r.tests[0]!.detail!.trim());
    expect(pid).toBeGreaterThan(0);
    await new Promise((res) => setTimeout(res, 200));
    // Killed: gone, or a zombie waiting for a reaper (PID 1 in a container may never reap it).
    let state = 'gone';
    try {
      state = readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /s, '')[0]!;
    } catch {
      // gone
    }
    expect(['gone', 'Z']).toContain(state);
  });

  it('stops a memory hog at the memory limit', async () => {
    const r = await runCode('xs = []\nwhile True:\n    xs.append(bytearray(10 ** 7))\n', SUM, FAST);
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

describe('network isolation', () => {
  let server: Server;
  let port: number;
  beforeAll(async () => {
    server = createServer((s) => s.end('hello\n'));
    await new Promise<void>((res) => server.listen(0, '127.0.0.1', res));
    port = (server.address() as { port: number }).port;
  });
  afterAll(() => new Promise<void>((res) => server.close(() => res())));

  const connect = (p: number): string =>
    `import socket\ns = socket.create_connection(("127.0.0.1", ${p}), timeout=2)\nprint(s.recv(100).decode().strip())\n`;

  it('records whether the sandbox had a network namespace', async () => {
    const probe = await probeSandbox();
    const r = await runCode('print(5)', { tests: [{ type: 'stdin', input: '', output: '5' }] }, FAST);
    expect(r.sandbox.network).toBe(probe.network);
    expect(['unshare', 'none']).toContain(r.sandbox.network);
  });

  it('a solution that opens a socket fails when isolation is available', async (ctx) => {
    const probe = await probeSandbox();
    // Control: outside the sandbox the same program reaches the server.
    expect((await promisify(execFile)(probe.python, ['-I', '-c', connect(port)])).stdout.trim()).toBe('hello');
    if (probe.network !== 'unshare') ctx.skip();
    const r = await runCode(connect(port), { tests: [{ type: 'stdin', input: '', output: 'hello' }] }, FAST);
    expect(r.passed).toBe(false);
    expect(r.verdict).toBe('runtime-error');
    expect(r.tests[0]!.detail).toMatch(/OSError|unreachable|refused/i);
  });
});
