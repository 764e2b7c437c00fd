/**
 * A real OpenAI-compatible HTTP server (node:http on a loopback port) that answers chat completions
 * from a table of canned replies, chosen by a substring of the last user message. Used by the eval
 * client and run tests: requests go over real sockets through Node's fetch.
 */
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { Socket } from 'node:net';

export interface CannedReply {
  /** Substring of the user message that selects this reply. */
  match: string;
  content: string | null;
  finishReason?: string;
  completionTokens?: number;
  /** Wait this long before answering (a hang when longer than the client's deadline). */
  delayMs?: number;
  /** Answer with this HTTP status and an OpenAI-style error instead. */
  status?: number;
}

export interface CannedServer {
  readonly url: string;
  /** Every request body received, in arrival order. */
  readonly bodies: Array<Record<string, unknown>>;
  /** Most requests in flight at once. */
  readonly maxInFlight: () => number;
  close(): Promise<void>;
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

export async function startCannedServer(replies: readonly CannedReply[], fallback = 'I am not sure.'): Promise<CannedServer> {
  const bodies: Array<Record<string, unknown>> = [];
  const sockets = new Set<Socket>();
  let inFlight = 0;
  let maxInFlight = 0;
  const server: Server = createServer(async (req, res) => {
    inFlight++;
    maxInFlight = Math.max(maxInFlight, inFlight);
    try {
      const body = JSON.parse(await readBody(req)) as { messages: Array<{ content: string }> };
      bodies.push(body as unknown as Record<string, unknown>);
      const prompt = body.messages[body.messages.length - 1]!.content;
      const reply = replies.find((r) => prompt.includes(r.match));
      if (reply?.delayMs !== undefined) await new Promise((r) => setTimeout(r, reply.delayMs));
      if (res.destroyed) return;
      if (reply?.status !== undefined) {
        res.writeHead(reply.status, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { message: 'canned failure', type: 'server_error' } }));
        return;
      }
      const content = reply === undefined ? fallback : reply.content;
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          id: 'chatcmpl-canned',
          object: 'chat.completion',
          model: 'canned',
          choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: reply?.finishReason ?? 'stop' }],
          usage: { prompt_tokens: 10, completion_tokens: reply?.completionTokens ?? 20, total_tokens: 10 + (reply?.completionTokens ?? 20) },
        }),
      );
    } finally {
      inFlight--;
    }
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    bodies,
    maxInFlight: () => maxInFlight,
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}
