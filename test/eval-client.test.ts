import { createServer } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { clientSettings, completeAll } from '../lib/eval/client.ts';
import { zeroReason } from '../lib/eval/score.ts';
import { startCannedServer, type CannedServer } from './eval-canned-server.ts';

let server: CannedServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

const ask = (id: string, text: string) => ({ id, messages: [{ role: 'user' as const, content: text }] });

describe('clientSettings', () => {
  it("defaults to the grader's settings", () => {
    expect(clientSettings({ baseUrl: 'http://h:8000/v1/' })).toEqual({
      url: 'http://h:8000/v1/chat/completions',
      model: 'ternforge',
      concurrency: 16,
      maxTokens: 4096,
      temperature: 0,
      timeoutMs: 300_000,
      extraBody: {},
    });
  });
});

describe('completeAll', () => {
  it('sends the settings, records content, finish_reason, usage and latency, in order', async () => {
    server = await startCannedServer([
      { match: 'one', content: 'Answer: A', completionTokens: 7 },
      { match: 'two', content: 'cut', finishReason: 'length', completionTokens: 4096 },
    ]);
    const { completions } = await completeAll([ask('q1', 'one'), ask('q2', 'two')], { baseUrl: server.url, extraBody: { reasoning_budget: 512 } });
    expect(server.bodies.map((b) => [b.max_tokens, b.temperature, b.reasoning_budget, b.model])).toEqual([
      [4096, 0, 512, 'ternforge'],
      [4096, 0, 512, 'ternforge'],
    ]);
    expect(completions.map((c) => [c.id, c.content, c.finishReason, c.usage?.completionTokens, c.timedOut, c.error, c.httpStatus])).toEqual([
      ['q1', 'Answer: A', 'stop', 7, false, null, 200],
      ['q2', 'cut', 'length', 4096, false, null, 200],
    ]);
    expect(completions.every((c) => c.latencyMs > 0)).toBe(true);
    expect(zeroReason(completions[1]!)).toBe('truncated');
  });

  it('keeps at most `concurrency` requests in flight', async () => {
    server = await startCannedServer([{ match: 'slow', content: 'ok', delayMs: 150 }]);
    const reqs = Array.from({ length: 10 }, (_, i) => ask(`q${i}`, 'slow'));
    const { completions } = await completeAll(reqs, { baseUrl: server.url, concurrency: 4 });
    expect(completions.map((c) => c.id)).toEqual(reqs.map((r) => r.id));
    expect(server.maxInFlight()).toBe(4);
  });

  it('a request that hangs past the deadline is aborted, recorded as a timeout, and scores zero', async () => {
    // The hanging reply would come after HANG_MS: done well before that, the client did not wait for it.
    const HANG_MS = 30_000;
    server = await startCannedServer([
      { match: 'hang', content: 'Answer: B', delayMs: HANG_MS },
      { match: 'fast', content: 'Answer: C' },
    ]);
    const started = Date.now();
    const { completions } = await completeAll([ask('h', 'hang'), ask('f', 'fast')], { baseUrl: server.url, timeoutMs: 800 });
    expect(Date.now() - started).toBeLessThan(HANG_MS / 2);
    const [hang, fast] = completions as [(typeof completions)[0], (typeof completions)[0]];
    expect(hang).toMatchObject({ id: 'h', content: null, finishReason: null, timedOut: true, error: 'no complete reply within 800 ms' });
    expect(hang.latencyMs).toBeGreaterThanOrEqual(790);
    expect(zeroReason(hang)).toBe('timeout');
    expect(fast).toMatchObject({ content: 'Answer: C', timedOut: false, error: null });
  });

  it('records HTTP errors, null content and a dead endpoint without throwing', async () => {
    server = await startCannedServer([
      { match: 'fail', content: null, status: 503 },
      { match: 'null', content: null },
    ]);
    const { completions } = await completeAll([ask('a', 'fail'), ask('b', 'null')], { baseUrl: server.url });
    expect(completions[0]).toMatchObject({ httpStatus: 503, timedOut: false, content: null });
    expect(completions[0]!.error).toMatch(/^HTTP 503: /);
    expect(completions[1]).toMatchObject({ content: null, finishReason: 'stop', error: null });
    // A port nothing listens on.
    const probe = createServer();
    await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
    const { port } = probe.address() as { port: number };
    await new Promise<void>((r) => probe.close(() => r()));
    const { completions: dead } = await completeAll([ask('c', 'x')], { baseUrl: `http://127.0.0.1:${port}` });
    expect(dead[0]).toMatchObject({ timedOut: false, httpStatus: null, content: null });
    expect(dead[0]!.error).toBe('TypeError: fetch failed (ECONNREFUSED)');
    expect(zeroReason(dead[0]!)).toBe('error');
  });
});
