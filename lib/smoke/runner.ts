/**
 * The smoke client, run as its own process beside serve.sh (inside the network namespace when there is
 * one): starts serve.sh in its own process group, measures gates 4-6 against it, always ends that
 * group, and writes its result as JSON.
 *
 *   node --import tsx lib/smoke/runner.ts <config.json>
 */
import { spawn } from 'node:child_process';
import { closeSync, existsSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import type { Gate, Reply, SmokeReport } from '../../schemas/generated/smoke-report.ts';

/** What the outer stage hands the runner. */
export interface RunnerConfig {
  /** The submission directory serve.sh runs from (a writable hard-link copy). */
  dir: string;
  port: number;
  /** The complete environment serve.sh starts with. */
  env: Record<string, string>;
  startupLimitS: number;
  deadlineS: number;
  maxTokens: number;
  concurrency: number;
  requireStop: boolean;
  /** serve.sh's stdout and stderr. */
  logPath: string;
  /** The server's process-group id is written here at once, so the outer stage can end it too. */
  pgidPath: string;
  resultPath: string;
  /** Where the server writes its start-up report (TERNFORGE_STARTUP_REPORT). */
  startupReportPath: string;
}

/** What the runner measured; the outer stage adds isolation, environment and params. */
export type RunnerResult = Pick<SmokeReport, 'passed' | 'failed_gates' | 'gates' | 'startup' | 'graded' | 'load' | 'health_after' | 'server'>;

const GRADED_PROMPT = 'What is 12 + 30? Think briefly, then give the final line as "Answer: <number>".';
const LOAD_PROMPTS = [
  'Name the capital of France. End with "Answer: <city>".',
  'What is 7 times 8? End with "Answer: <number>".',
  'Which planet is closest to the Sun? End with "Answer: <planet>".',
  'Write a Python function that returns the square of x, in one code block.',
  'Is 17 a prime number? End with "Answer: yes" or "Answer: no".',
  'What is the boiling point of water at sea level in Celsius? End with "Answer: <number>".',
  'Simplify 6/8. Put the result in \\boxed{}.',
  'Which gas do plants take in for photosynthesis? Options: (A) O2 (B) CO2 (C) N2 (D) H2. End with "Answer: <letter>".',
];

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const now = (): number => performance.now() / 1000;
const round = (x: number, d = 3): number => Number(x.toFixed(d));

function percentile(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
}

/** GET /health once: status (null when no answer) and milliseconds. */
async function health(base: string, timeoutMs: number): Promise<{ status: number | null; ms: number; problem?: string }> {
  const t = performance.now();
  try {
    const r = await fetch(`${base}/health`, { signal: AbortSignal.timeout(timeoutMs) });
    await r.arrayBuffer();
    return { status: r.status, ms: performance.now() - t };
  } catch (e) {
    return { status: null, ms: performance.now() - t, problem: (e as Error).message };
  }
}

/** One chat completion as graded, checked for well-formedness. */
async function chat(base: string, index: number, prompt: string, c: RunnerConfig): Promise<Reply> {
  const t = now();
  const body = { model: 'ternforge', messages: [{ role: 'user', content: prompt }], max_tokens: c.maxTokens, temperature: 0 };
  try {
    const r = await fetch(`${base}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal: AbortSignal.timeout(c.deadlineS * 1000) });
    const text = await r.text();
    const latency = round(now() - t);
    if (r.status !== 200) return { index, ok: false, status: r.status, latency_s: latency, problem: `HTTP ${r.status}: ${text.slice(0, 200)}` };
    let j: { choices?: Array<{ message?: { content?: unknown }; finish_reason?: unknown }>; usage?: { completion_tokens?: unknown } };
    try {
      j = JSON.parse(text) as typeof j;
    } catch {
      return { index, ok: false, status: 200, latency_s: latency, problem: `not JSON: ${text.slice(0, 200)}` };
    }
    const choice = j.choices?.[0];
    const content = choice?.message?.content;
    const finish = typeof choice?.finish_reason === 'string' ? choice.finish_reason : null;
    const reply: Reply = { index, ok: true, status: 200, latency_s: latency, finish_reason: finish };
    if (typeof content === 'string') {
      reply.content_chars = content.length;
      reply.content_head = content.slice(0, 80);
    }
    if (typeof j.usage?.completion_tokens === 'number') reply.completion_tokens = j.usage.completion_tokens;
    const problem =
      typeof content !== 'string' ? `content is ${content === null ? 'null' : typeof content}`
      : content.trim() === '' ? 'content is empty'
      : finish === null ? 'no finish_reason'
      : c.requireStop && finish !== 'stop' ? `finish_reason is ${finish}, not stop`
      : undefined;
    if (problem !== undefined) {
      reply.ok = false;
      reply.problem = problem;
    }
    return reply;
  } catch (e) {
    const timedOut = (e as Error).name === 'TimeoutError';
    return { index, ok: false, latency_s: round(now() - t), problem: timedOut ? `no reply within the ${c.deadlineS} s deadline` : `request failed: ${(e as Error).message}` };
  }
}

function tailOf(path: string, lines = 40): string {
  return existsSync(path) ? readFileSync(path, 'utf8').trimEnd().split('\n').slice(-lines).join('\n') : '';
}

/** Run serve.sh and the gates; always ends the server's process group before returning. */
export async function runGates(c: RunnerConfig): Promise<RunnerResult> {
  const base = `http://127.0.0.1:${c.port}`;
  const log = openSync(c.logPath, 'a');
  const t0 = now();
  const child = spawn('bash', ['serve.sh'], { cwd: c.dir, env: c.env, detached: true, stdio: ['ignore', log, log] });
  closeSync(log);
  const pgid = child.pid!;
  writeFileSync(c.pgidPath, String(pgid));
  let exited: number | null = null;
  let exitedAt: number | null = null;
  child.once('exit', (code, signal) => {
    exited = code ?? (signal !== null ? 128 : -1);
    exitedAt = now();
  });

  const gates: Gate[] = [];
  const result: RunnerResult = { passed: false, failed_gates: [], gates, startup: { first_answer_s: null, health_200_s: null }, graded: null, load: null, health_after: null, server: { log_tail: '' } };
  try {
    // Gate 4: /health 200 within the start-up limit.
    while (now() - t0 < c.startupLimitS && exited === null) {
      const h = await health(base, 2000);
      if (h.status !== null && result.startup.first_answer_s === null) result.startup.first_answer_s = round(now() - t0);
      if (h.status === 200) {
        result.startup.health_200_s = round(now() - t0);
        break;
      }
      await sleep(250);
    }
    if (existsSync(c.startupReportPath)) {
      try {
        const report = JSON.parse(readFileSync(c.startupReportPath, 'utf8')) as Record<string, unknown>;
        result.startup.report = report;
        const phases = report.phases;
        if (typeof phases === 'object' && phases !== null) result.startup.phases = Object.fromEntries(Object.entries(phases).filter(([, v]) => typeof v === 'number')) as Record<string, number>;
      } catch {
        /* a half-written report: left out */
      }
    }
    // serve.sh times the install itself; when the server's report lacks it, take serve.sh's own line.
    const installed = /\[serve\.sh\] install took ([0-9.]+) s/.exec(existsSync(c.logPath) ? readFileSync(c.logPath, 'utf8') : '');
    if (installed !== null && result.startup.phases?.install === undefined) result.startup.phases = { ...(result.startup.phases ?? {}), install: Number(installed[1]) };
    if (result.startup.health_200_s === null) {
      result.startup.exited = exited;
      const why = exited !== null ? `serve.sh exited with code ${exited} after ${round((exitedAt ?? now()) - t0, 1)} s before /health answered 200` : `/health did not answer 200 within ${c.startupLimitS} s`;
      gates.push({ gate: 4, name: 'start-up', status: 'failed', detail: why });
      gates.push({ gate: 5, name: 'load', status: 'not-run' }, { gate: 6, name: 'health-after-load', status: 'not-run' });
      return result;
    }
    gates.push({ gate: 4, name: 'start-up', status: 'passed', detail: `/health 200 after ${result.startup.health_200_s} s` });

    // Gate 5: one request as graded, then `concurrency` at once, /health probed throughout.
    result.graded = await chat(base, 0, GRADED_PROMPT, c);
    const tLoad = now();
    let loading = true;
    const probes: number[] = [];
    let probeFailures = 0;
    const prober = (async () => {
      while (loading) {
        const h = await health(base, 5000);
        if (h.status === 200) probes.push(h.ms);
        else probeFailures++;
        await sleep(250);
      }
    })();
    const replies = await Promise.all(Array.from({ length: c.concurrency }, (_, i) => chat(base, i, LOAD_PROMPTS[i % LOAD_PROMPTS.length]!, c)));
    loading = false;
    await prober;
    const wall = round(now() - tLoad);
    const finish: Record<string, number> = {};
    for (const r of replies) finish[r.finish_reason ?? 'null'] = (finish[r.finish_reason ?? 'null'] ?? 0) + 1;
    const tokens = replies.reduce((s, r) => s + (r.completion_tokens ?? 0), 0);
    const lat = replies.map((r) => r.latency_s);
    result.load = {
      concurrency: c.concurrency,
      wall_s: wall,
      ok: replies.filter((r) => r.ok).length,
      finish_reasons: finish,
      completion_tokens: tokens,
      tokens_per_s: round(tokens / Math.max(wall, 1e-6), 2),
      latency_s: { min: Math.min(...lat), p50: percentile(lat, 50), max: Math.max(...lat) },
      replies,
      health_during: { probes: probes.length + probeFailures, failures: probeFailures, ...(probes.length > 0 ? { p50_ms: round(percentile(probes, 50), 1), p99_ms: round(percentile(probes, 99), 1), max_ms: round(Math.max(...probes), 1) } : {}) },
    };
    const bad = [result.graded, ...replies].filter((r) => !r.ok);
    if (bad.length === 0) gates.push({ gate: 5, name: 'load', status: 'passed', detail: `graded request and ${c.concurrency} concurrent replies well-formed; finish_reason ${JSON.stringify(finish)}` });
    else gates.push({ gate: 5, name: 'load', status: 'failed', detail: `${bad.length} of ${c.concurrency + 1} replies not well-formed: ${bad.slice(0, 4).map((r) => `${r === result.graded ? 'graded' : `#${r.index}`}: ${r.problem}`).join('; ')}` });

    // Gate 6: /health still answers.
    const h = await health(base, 10_000);
    result.health_after = { status: h.status, latency_ms: round(h.ms, 1), ...(h.problem !== undefined ? { problem: h.problem } : {}) };
    gates.push(h.status === 200 ? { gate: 6, name: 'health-after-load', status: 'passed' } : { gate: 6, name: 'health-after-load', status: 'failed', detail: `/health after the load: ${h.status ?? h.problem}` });
    return result;
  } finally {
    result.server.stopped_by = await stopGroup(pgid, () => exited !== null);
    result.server.log_tail = tailOf(c.logPath);
    result.failed_gates = gates.filter((g) => g.status === 'failed').map((g) => g.gate);
    result.passed = gates.length === 3 && gates.every((g) => g.status === 'passed');
  }
}

/** SIGTERM the group, wait up to 10 s, then SIGKILL. Returns how it ended. */
export async function stopGroup(pgid: number, isDone: () => boolean): Promise<string> {
  const alive = (): boolean => {
    try {
      process.kill(-pgid, 0);
      return true;
    } catch {
      return false;
    }
  };
  if (!alive()) return isDone() ? 'exited by itself' : 'gone';
  process.kill(-pgid, 'SIGTERM');
  for (let i = 0; i < 100 && alive(); i++) await sleep(100);
  if (!alive()) return 'SIGTERM';
  process.kill(-pgid, 'SIGKILL');
  return 'SIGKILL after 10 s';
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const config = JSON.parse(readFileSync(process.argv[2]!, 'utf8')) as RunnerConfig;
  let pgid: number | null = null;
  const onSignal = (): void => {
    pgid ??= existsSync(config.pgidPath) ? Number(readFileSync(config.pgidPath, 'utf8')) : null;
    if (pgid !== null) {
      try {
        process.kill(-pgid, 'SIGKILL');
      } catch {
        /* gone */
      }
    }
    process.exit(130);
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  const result = await runGates(config);
  writeFileSync(config.resultPath, JSON.stringify(result, null, 2) + '\n');
  process.exit(0);
}
