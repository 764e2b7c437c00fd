/**
 * The request recorder: a loopback HTTP server between lm-eval's client and the served model that sees every
 * chat-completions request as the grader's client would, and keeps what lm-eval's output files do not: each
 * request's wall time, finish reason, token counts, and whether the server wrote the content itself
 * (`ternforge.fallback_content`).
 *
 * It forwards each body unchanged (`post`, client.ts) under the grader's deadline. A reply that came back
 * well-formed goes to lm-eval byte for byte. A request that ran past the deadline, failed, or got an HTTP
 * error is answered with an empty assistant message (`finish_reason` "length" for a deadline, "stop"
 * otherwise) and a `ternforge_recorder` key saying why: lm-eval's client raises on an error and ends the
 * whole run after its retries, while the grader scores such a request wrong and goes on. The empty reply is
 * scored wrong by lm-eval too, and the record marks it, so the report counts it apart (timeouts, errors).
 * Nothing is hidden: the record holds the true outcome and the stage's scoring reads the record, not the reply.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { post, type ChatMessage, type Completion } from './client.ts';

/** One chat-completions request lm-eval sent, and what came of it. */
export interface RecordedRequest {
  /** Arrival order. */
  readonly seq: number;
  readonly messages: readonly ChatMessage[];
  readonly maxTokens: number | null;
  readonly completion: Completion;
}

export interface Recorder {
  /** The root lm-eval's client is pointed at (`<url>/v1/chat/completions`). */
  readonly url: string;
  readonly records: readonly RecordedRequest[];
  close(): Promise<void>;
}

/** The key a request's messages are matched by: the same list lm-eval logs with each sample. */
export function messagesKey(messages: readonly ChatMessage[]): string {
  return JSON.stringify(messages.map((m) => [m.role, m.content]));
}

const MAX_BODY = 64 * 2 ** 20;

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > MAX_BODY) reject(new Error(`request body over ${MAX_BODY} bytes`));
      else chunks.push(c);
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function send(res: ServerResponse, status: number, body: string): void {
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

/** The stand-in reply for a request that got no well-formed one (see the module comment). */
function emptyReply(c: Completion, model: unknown): string {
  return JSON.stringify({
    id: `recorder-${c.id}`,
    object: 'chat.completion',
    model: typeof model === 'string' ? model : 'unknown',
    choices: [{ index: 0, message: { role: 'assistant', content: '' }, finish_reason: c.timedOut ? 'length' : 'stop' }],
    usage: null,
    ternforge_recorder: { timed_out: c.timedOut, error: c.error },
  });
}

/**
 * Listen on 127.0.0.1 (a free port) and forward to `upstream` (a server root), `timeoutMs` per request;
 * `onRecord` sees the records after each request ends (lm-eval's own progress bars are off: harness.py).
 */
export async function startRecorder(opts: { upstream: string; timeoutMs: number; signal?: AbortSignal; onRecord?: (records: readonly RecordedRequest[]) => void }): Promise<Recorder> {
  const records: RecordedRequest[] = [];
  const target = `${opts.upstream.replace(/\/+$/, '')}/v1/chat/completions`;
  const server = createServer((req, res) => {
    if (req.method !== 'POST' || req.url?.split('?')[0] !== '/v1/chat/completions') {
      send(res, 404, JSON.stringify({ error: { message: `the recorder forwards POST /v1/chat/completions only, not ${req.method} ${req.url}`, type: 'invalid_request_error' } }));
      return;
    }
    void (async () => {
      let body: { messages?: ChatMessage[]; max_tokens?: number; model?: unknown };
      try {
        body = JSON.parse(await readBody(req)) as typeof body;
      } catch (e) {
        send(res, 400, JSON.stringify({ error: { message: `the recorder could not read the request: ${(e as Error).message}`, type: 'invalid_request_error' } }));
        return;
      }
      const seq = records.length;
      const { completion, reply } = await post(target, String(seq), body, opts.timeoutMs, opts.signal);
      records.push({ seq, messages: body.messages ?? [], maxTokens: typeof body.max_tokens === 'number' ? body.max_tokens : null, completion });
      opts.onRecord?.(records);
      send(res, 200, reply ?? emptyReply(completion, body.model));
    })();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    records,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
