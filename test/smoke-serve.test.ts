/**
 * smoke-serve: the gate logic against real processes. A small fake serve.sh starts a real HTTP server
 * (Python's http.server) whose misbehaviour is chosen per test: it never turns healthy (gate 4), answers
 * with empty content (gate 5), or stops answering /health after the load (gate 6). Then the real tiny
 * submission, built by the real pipeline, served by its own serve.sh inside a network namespace.
 */
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { networkInterfaces, tmpdir } from 'node:os';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { SchemaSet } from '../engine/json-io.ts';
import { runSmoke, venvBaseDir, type SmokeOptions } from '../lib/smoke/smoke.ts';
import type { SmokeReport } from '../schemas/generated/smoke-report.ts';
import { spawnSync } from 'node:child_process';
import { JSON_HANDLER } from './fake-json-handler.ts';

const root = join(import.meta.dirname, '..');
const venv = process.env.TERNFORGE_VENV || join(root, '.ternforge', 'venv');
const pythonDir = venvBaseDir(join(venv, 'bin', 'python'));
const schemas = new SchemaSet(join(root, 'schemas'));
/** Whether this machine can make a network namespace at all (unshare on PATH): then smoke-serve must use one. */
const hasUnshare = spawnSync('unshare', ['--version']).error === undefined;
const scratchDirs: string[] = [];
afterAll(() => {
  for (const d of scratchDirs) rmSync(d, { recursive: true, force: true });
});

function scratch(): string {
  const d = mkdtempSync(join(tmpdir(), 'ternforge-smoke-test-'));
  scratchDirs.push(d);
  return d;
}

/** A fake submission: serve.sh runs a real HTTP server whose behaviour is `mode`. */
const FAKE_SERVER = String.raw`
import json, os, socket, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
mode = sys.argv[1]
if mode.startswith("netprobe:"):  # netprobe:<port>:<addr,addr,...>: what this server's network reaches
    _, port, addrs = mode.split(":", 2)
    seen = {"interfaces": sorted(n for _, n in socket.if_nameindex()), "connect": {}}
    for a in addrs.split(","):
        try:
            socket.create_connection((a, int(port)), timeout=3).close()
            seen["connect"][a] = "connected"
        except OSError as e:
            seen["connect"][a] = type(e).__name__
    print("NETPROBE " + json.dumps(seen, sort_keys=True), file=sys.stderr, flush=True)
    mode = "ok"
started = time.time()
state = {"chats": 0}
${JSON_HANDLER}    def do_GET(self):
        if self.path != "/health": return self.send(404, {})
        if mode == "never-healthy": return self.send(503, {"status": "loading"})
        if mode == "dies-after-load" and state["chats"] >= 17: return self.send(503, {"status": "broken"})
        if time.time() - started < 0.5: return self.send(503, {"status": "loading"})
        self.send(200, {"status": "ok"})
    def do_POST(self):
        n = int(self.headers.get("content-length", 0)); req = json.loads(self.rfile.read(n))
        state["chats"] += 1
        time.sleep(0.2)
        content = "" if mode == "empty-content" else "Answer: 42"
        self.send(200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "length"}],
                        "usage": {"prompt_tokens": 5, "completion_tokens": req.get("max_tokens", 1), "total_tokens": 6}})
report = os.environ.get("TERNFORGE_STARTUP_REPORT")
if report:
    open(report, "w").write(json.dumps({"status": "ready", "phases": {"install": 0.0, "load": 0.1, "warmup": 0.01}}))
ThreadingHTTPServer(("0.0.0.0", int(os.environ["PORT"])), H).serve_forever()
`;

/** Each fake server's command line carries a token, so a test can find its processes. */
let lastToken = '';
function fakeSubmission(mode: string): string {
  lastToken = `fake-token-${process.pid}-${Math.random().toString(36).slice(2)}`;
  const dir = join(scratch(), 'fake-submission');
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'server.py'), FAKE_SERVER);
  writeFileSync(join(dir, 'serve.sh'), `#!/usr/bin/env bash\nset -eu\necho "[fake serve.sh] env: PYTHONPATH=\${PYTHONPATH:-unset} HOME=$HOME" >&2\nexec python3 "$(dirname "$0")/server.py" ${mode} ${lastToken}\n`);
  chmodSync(join(dir, 'serve.sh'), 0o755);
  return dir;
}

async function smoke(mode: string, over: Partial<SmokeOptions> = {}): Promise<SmokeReport> {
  const r = await runSmoke({ submission: fakeSubmission(mode), scratch: scratch(), maxTokens: 8, concurrency: 16, deadlineS: 20, startupLimitS: 20, requireStop: false, namespace: 'auto', ...(pythonDir !== undefined ? { pythonDir } : {}), ...over });
  if (!r.ok) throw new Error(r.error);
  expect(schemas.validate('smoke-report.schema.json', r.value)).toEqual([]);
  return r.value;
}

/** Processes of the last fake server (none may outlive a smoke run). */
function fakeServersAlive(): number {
  const r = spawnSync('pgrep', ['-f', lastToken], { encoding: 'utf8' });
  return r.stdout.trim() === '' ? 0 : r.stdout.trim().split('\n').length;
}

describe('gate logic against a fake server', () => {
  test('a well-behaved server passes gates 4-6, with true finish_reason counts and the phase timings', async () => {
    const r = await smoke('ok');
    expect(r.passed).toBe(true);
    expect(r.gates.map((g) => [g.gate, g.status])).toEqual([[4, 'passed'], [5, 'passed'], [6, 'passed']]);
    expect(r.load!.ok).toBe(16);
    expect(r.load!.finish_reasons).toEqual({ length: 16 }); // as the server said: never turned into stop
    expect(r.load!.completion_tokens).toBe(16 * 8);
    expect(r.startup.phases).toEqual({ install: 0, load: 0.1, warmup: 0.01 });
    expect(r.startup.health_200_s).toBeGreaterThan(0.4);
    expect(r.health_after!.status).toBe(200);
    expect(r.load!.health_during.failures).toBe(0);
    expect(r.server.stopped_by).toBe('SIGTERM');
    expect(r.environment.PYTHONPATH).toBeUndefined();
    expect(Object.keys(r.environment).sort()).toEqual(['HOME', 'LANG', 'PATH', 'PORT', 'TERNFORGE_STARTUP_REPORT', 'TMPDIR']);
    expect(r.server.log_tail).toContain('PYTHONPATH=unset');
    expect(fakeServersAlive()).toBe(0);
  });

  test('require_stop fails gate 5 on replies cut off at max_tokens', async () => {
    const r = await smoke('ok', { requireStop: true });
    expect(r.failed_gates).toEqual([5]);
    expect(r.gates[1]!.detail).toContain('finish_reason is length, not stop');
  });

  test('a server that never turns healthy fails gate 4 and the rest are not run', async () => {
    const r = await smoke('never-healthy', { startupLimitS: 3 });
    expect(r.passed).toBe(false);
    expect(r.failed_gates).toEqual([4]);
    expect(r.gates[0]).toEqual({ gate: 4, name: 'start-up', status: 'failed', detail: '/health did not answer 200 within 3 s' });
    expect(r.gates.slice(1).map((g) => g.status)).toEqual(['not-run', 'not-run']);
    expect(r.startup.first_answer_s).not.toBeNull();
    expect(fakeServersAlive()).toBe(0);
  });

  test('a serve.sh that exits fails gate 4 naming its exit code', async () => {
    const dir = fakeSubmission('ok');
    writeFileSync(join(dir, 'serve.sh'), '#!/usr/bin/env bash\necho "missing wheels in wheels/: uvicorn==0.55.0" >&2\nexit 3\n');
    const r = await runSmoke({ submission: dir, scratch: scratch(), maxTokens: 8, concurrency: 16, deadlineS: 20, startupLimitS: 20, requireStop: false, namespace: 'auto' });
    expect(r.ok && r.value.gates[0]!.detail).toMatch(/^serve\.sh exited with code 3 after [0-9.]+ s before \/health answered 200$/);
    expect(r.ok && r.value.server.log_tail).toContain('uvicorn==0.55.0');
  });

  test('empty content fails gate 5, naming the problem', async () => {
    const r = await smoke('empty-content');
    expect(r.failed_gates).toEqual([5]);
    expect(r.gates[1]!.detail).toMatch(/^17 of 17 replies not well-formed: graded: content is empty; #0: content is empty/);
    expect(r.gates[2]!.status).toBe('passed');
  });

  test('/health dead after the load fails gate 6', async () => {
    const r = await smoke('dies-after-load');
    expect(r.failed_gates).toEqual([6]);
    expect(r.gates[2]).toEqual({ gate: 6, name: 'health-after-load', status: 'failed', detail: '/health after the load: 503' });
    expect(r.health_after!.status).toBe(503);
  });

  test('the server and client run inside a network namespace with only loopback', async () => {
    // What the server reaches, seen by the server itself: a TCP listener of this test on every host
    // address, tried on loopback and on the host's non-loopback addresses.
    const external = Object.values(networkInterfaces()).flat().filter((a) => a !== undefined && a.family === 'IPv4' && !a.internal).map((a) => a!.address);
    let reached = 0;
    const listener = createServer((s) => {
      reached++;
      s.on('error', () => undefined);
      s.end();
    });
    await new Promise<void>((res) => listener.listen(0, '0.0.0.0', res));
    try {
      const port = (listener.address() as { port: number }).port;
      const r = await smoke(`netprobe:${port}:${['127.0.0.1', ...external].join(',')}`);
      const line = /NETPROBE (.*)/.exec(r.server.log_tail)?.[1];
      expect(line, r.server.log_tail).toBeDefined();
      const seen = JSON.parse(line!) as { interfaces: string[]; connect: Record<string, string> };
      if (!hasUnshare) {
        // No way to make a namespace here: the report must say so (the server then shares the host's network).
        expect(r.isolation.network_namespace).toBe(false);
        expect(r.isolation.reason).toMatch(/unshare/);
        return;
      }
      // unshare exists: running without the namespace is a failure, never a skip.
      expect(r.isolation.network_namespace, `unshare exists but smoke-serve ran without a network namespace: ${r.isolation.reason}`).toBe(true);
      expect(seen.interfaces).toEqual(['lo']);
      expect(reached).toBe(0);
      for (const a of ['127.0.0.1', ...external]) expect(seen.connect[a], a).not.toBe('connected');
      expect(r.passed).toBe(true); // and its own loopback still carried the load
    } finally {
      await new Promise<void>((res) => listener.close(() => res()));
    }
  });

  test('an abort ends the runner and the server at once', async () => {
    const ac = new AbortController();
    const pending = runSmoke({ submission: fakeSubmission('never-healthy'), scratch: scratch(), maxTokens: 8, concurrency: 16, deadlineS: 20, startupLimitS: 60, requireStop: false, namespace: 'auto', signal: ac.signal, ...(pythonDir !== undefined ? { pythonDir } : {}) });
    await new Promise((r) => setTimeout(r, 3000));
    expect(fakeServersAlive()).toBe(1);
    // Without the abort the start-up limit (60 s) would end it: well before that is "at once".
    const t = Date.now();
    ac.abort();
    const r = await pending;
    expect(Date.now() - t).toBeLessThan(30_000);
    expect(r.ok).toBe(false);
    expect(r.ok ? '' : r.error).toContain('the smoke run was aborted');
    await new Promise((res) => setTimeout(res, 300));
    expect(fakeServersAlive()).toBe(0);
  });
});

describe('the real tiny submission', () => {
  test('smoke-serve runs serve.sh offline and passes gates 4-6', { timeout: 900_000 }, async () => {
    // $TERNFORGE_TINY_BUILD (the suite's shared build, test/global-setup.ts): smoke-serve already ran there
    // through the real CLI; check what it wrote. $TERNFORGE_EMIT_TEST_WORKDIR alone: smoke that emitted
    // submission directly. Neither: build and smoke here.
    const built = process.env.TERNFORGE_TINY_BUILD;
    const given = built ?? process.env.TERNFORGE_EMIT_TEST_WORKDIR;
    const workdir = given ?? scratch();
    let r: SmokeReport;
    let out: string | undefined;
    if (built !== undefined) {
      out = join(workdir, '.ternforge', 'tiny', 'smoke-serve', 'outputs');
      r = JSON.parse(readFileSync(join(out, 'smoke.json'), 'utf8')) as SmokeReport;
    } else if (given !== undefined) {
      const got = await runSmoke({ submission: join(workdir, '.ternforge', 'tiny', 'emit', 'outputs'), scratch: scratch(), maxTokens: 64, concurrency: 16, deadlineS: 300, startupLimitS: 300, requireStop: false, namespace: 'auto', ...(pythonDir !== undefined ? { pythonDir } : {}) });
      if (!got.ok) throw new Error(got.error);
      r = got.value;
    } else {
      const cli = spawnSync(process.execPath, ['--import', 'tsx', join(root, 'pipeline.ts'), 'smoke-serve', '--profile', 'tiny', '--workdir', workdir], { cwd: root, encoding: 'utf8', env: { ...process.env, TERNFORGE_VENV: venv }, timeout: 880_000 });
      expect(cli.status, cli.stdout + cli.stderr).toBe(0);
      out = join(workdir, '.ternforge', 'tiny', 'smoke-serve', 'outputs');
      r = JSON.parse(readFileSync(join(out, 'smoke.json'), 'utf8')) as SmokeReport;
    }
    expect(schemas.validate('smoke-report.schema.json', r)).toEqual([]);
    expect(r.passed).toBe(true);
    expect(r.isolation.network_namespace, `unshare exists but the tiny smoke ran without a network namespace: ${r.isolation.reason}`).toBe(hasUnshare);
    expect(r.startup.health_200_s).toBeLessThan(300);
    expect(Object.keys(r.startup.phases ?? {})).toEqual(expect.arrayContaining(['install', 'load']));
    expect(r.load!.ok).toBe(16);
    expect(Object.values(r.load!.finish_reasons).reduce((a, b) => a + b, 0)).toBe(16);
    expect(r.graded!.ok).toBe(true);
    expect(r.health_after!.status).toBe(200);
    if (out !== undefined) expect(existsSync(join(out, 'serve.log'))).toBe(true);
    // the emitted directory itself was never written to
    const emitted = join(workdir, '.ternforge', 'tiny', 'emit', 'outputs');
    expect(existsSync(join(emitted, '.packages'))).toBe(false);
    expect(existsSync(join(emitted, 'evidence', 'startup-report.json'))).toBe(false);
  });
});
