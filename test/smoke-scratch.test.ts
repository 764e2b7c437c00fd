/**
 * A SIGKILLed smoke run leaves no process and no scratch directory behind after the next run.
 *
 * A real smoke run (test/fixtures/smoke-run.ts: prepareScratch + runSmoke, as stages/smoke-serve.ts
 * does) runs as a child process against a fake submission whose serve.sh starts a real HTTP server that
 * turns healthy, then holds every chat request, and also starts a `setsid` child (out of the server's
 * process group). Once the server is up and the load is under way, the run is SIGKILLed: its runner,
 * server and setsid child live on (the defect). The next run must end them all and remove the killed
 * run's scratch directory, then do its own work and remove its own. Processes are found independently
 * of the code under test: by a token in their command line (pgrep -f), and by the recorded process
 * groups read from /proc.
 *
 * The full stage on the tiny build is not SIGKILLed here (the fake server makes this take seconds, not a
 * minute); the stage calls the same prepareScratch before each run.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { venvBaseDir } from '../lib/smoke/smoke.ts';
import { JSON_HANDLER } from './fake-json-handler.ts';

const root = join(import.meta.dirname, '..');
const venv = process.env.TERNFORGE_VENV || join(root, '.ternforge', 'venv');
const pythonDir = venvBaseDir(join(venv, 'bin', 'python'));
const work = mkdtempSync(join(tmpdir(), 'ternforge-smoke-kill-'));
const base = join(work, '.ternforge', 'tiny', 'smoke-serve');
const token = `smoke-kill-token-${process.pid}-${Math.random().toString(36).slice(2)}`;
const children: ChildProcess[] = [];

afterAll(() => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  for (const pid of tokenProcesses()) process.kill(pid, 'SIGKILL'); // only what carries this test's token
  rmSync(work, { recursive: true, force: true });
});

const SERVER = String.raw`
import json, os, subprocess, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
mode, token = sys.argv[1], sys.argv[2]
if mode == "hold":
    # A descendant that leaves the server's process group.
    subprocess.Popen(["setsid", sys.executable, "-c", "import time; time.sleep(300)", token])
${JSON_HANDLER}    def do_GET(self):
        self.send(200, {"status": "ok"})
    def do_POST(self):
        n = int(self.headers.get("content-length", 0)); self.rfile.read(n)
        open(os.path.join(os.environ["HOME"], "chat-started"), "w").close()
        if mode == "hold": time.sleep(300)
        self.send(200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": "Answer: 42"}, "finish_reason": "length"}],
                        "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}})
server = ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), H)
open(os.environ["TERNFORGE_STARTUP_REPORT"], "w").write(json.dumps({"status": "ready", "phases": {}}))
server.serve_forever()
`;

function submission(mode: 'hold' | 'quick'): string {
  const dir = join(work, `submission-${mode}`);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'server.py'), SERVER);
  writeFileSync(join(dir, 'serve.sh'), `#!/usr/bin/env bash\nset -eu\nexec python3 "$(dirname "$0")/server.py" ${mode} ${token}\n`);
  chmodSync(join(dir, 'serve.sh'), 0o755);
  return dir;
}

function startRun(mode: 'hold' | 'quick'): { child: ChildProcess; out: () => string } {
  const args = ['--import', 'tsx', join(root, 'test', 'fixtures', 'smoke-run.ts'), base, submission(mode), ...(pythonDir !== undefined ? [pythonDir] : [])];
  const child = spawn(process.execPath, args, { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  return { child, out: () => out };
}

async function until(what: string, cond: () => boolean, ms = 60_000): Promise<void> {
  const t0 = Date.now();
  while (!cond()) {
    if (Date.now() - t0 > ms) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Live (non-zombie) processes whose command line holds the token. */
function tokenProcesses(): number[] {
  const r = spawnSync('pgrep', ['-f', token], { encoding: 'utf8' });
  return r.stdout.trim() === '' ? [] : r.stdout.trim().split('\n').map(Number).filter((pid) => !zombie(pid));
}

function zombie(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
  } catch {
    return true; // gone
  }
}

/** Live processes whose process group is one of groups, read from /proc. */
function inGroups(groups: number[]): number[] {
  const found: number[] = [];
  for (const e of readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const stat = readFileSync(`/proc/${e}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (fields[0] !== 'Z' && groups.includes(Number(fields[2]))) found.push(Number(e));
    } catch {
      /* gone */
    }
  }
  return found;
}

describe('a SIGKILLed smoke run', () => {
  test('leaves no process and no scratch directory behind after the next run', async () => {
    const first = startRun('hold');
    let scratch = '';
    await until('the first run to name its scratch', () => {
      scratch = /^scratch (.+)$/m.exec(first.out())?.[1] ?? '';
      return scratch !== '';
    });
    expect(scratch.startsWith(base + '/')).toBe(true); // under the workdir, not the system temp dir
    await until('the server to be up and holding a chat request', () => existsSync(join(scratch, 'startup-report.json')) && existsSync(join(scratch, 'home', 'chat-started')));
    const groups = ['runner.pgid', 'server.pgid'].map((f) => Number(readFileSync(join(scratch, f), 'utf8')));
    expect(groups.every((g) => Number.isInteger(g) && g > 1)).toBe(true);

    first.child.kill('SIGKILL');
    await until('the first run to die', () => first.child.signalCode !== null);
    // What the defect was: the runner, the server and the setsid child outlive the killed run.
    await new Promise((r) => setTimeout(r, 500));
    const server = tokenProcesses();
    expect(server.length, first.out()).toBeGreaterThanOrEqual(2); // bash→python server + the setsid child
    expect(inGroups(groups).length).toBeGreaterThanOrEqual(2); // runner (node) + server
    expect(existsSync(scratch)).toBe(true);

    const next = startRun('quick');
    await until('the next run to finish', () => next.child.exitCode !== null, 90_000);
    expect(next.child.exitCode, next.out()).toBe(0);
    expect(next.out()).toMatch(/^done true$/m);
    expect(next.out()).toMatch(/a killed smoke run left .*: ended its \d+ process\(es\), removed the directory/);
    expect(tokenProcesses()).toEqual([]);
    expect(inGroups(groups)).toEqual([]);
    expect(existsSync(scratch)).toBe(false);
    expect(existsSync(base) ? readdirSync(base) : []).toEqual([]); // the next run removed its own too
  }, 180_000);
});
