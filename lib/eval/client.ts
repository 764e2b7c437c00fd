/**
 * A client for an OpenAI-compatible `/v1/chat/completions` endpoint with the grader's settings:
 * `max_tokens` 4096, temperature 0, 16 requests in flight, 300 s per request (an `AbortSignal` timeout
 * covering headers and body). Every request settles into a `Completion` record, never a throw:
 * transport failures, HTTP errors and malformed replies are recorded as `error`, deadlines as
 * `timedOut`, and the scorer gives all of them zero.
 *
 * Node's fetch (undici) has its own 300 s header and body timeouts; a `timeoutMs` above that is capped
 * by them (recorded as an error, not a timeout).
 */
import { mapPool } from './pool.ts';
import type { ClientSettings } from '../../schemas/generated/eval-report.ts';
export type { ClientSettings };

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant';
  content: string;
}

/** One request to send. */
export interface ChatRequest {
  /** Caller's key for the request (the question's id). */
  readonly id: string;
  readonly messages: readonly ChatMessage[];
}

export interface ClientOptions {
  /** Server root, e.g. `http://127.0.0.1:8000` (with or without a trailing `/v1`). */
  baseUrl: string;
  /** The `model` field; the server accepts any name. Default `ternforge`. */
  model?: string;
  /** Requests in flight at once. Default 16 (the grader's load). */
  concurrency?: number;
  /** `max_tokens`. Default 4096. */
  maxTokens?: number;
  /** `temperature`. Default 0. */
  temperature?: number;
  /** Per-request deadline in ms, from sending to the end of the body. Default 300000. */
  timeoutMs?: number;
  /** Extra fields merged into every request body (e.g. a reasoning budget a sweep varies). */
  extraBody?: Record<string, unknown>;
  /** Aborts every request still running (recorded as errors, not timeouts). */
  signal?: AbortSignal;
}

/** What came back for one request. */
export interface Completion {
  readonly id: string;
  /** `choices[0].message.content`; null when no reply came or the server sent null. */
  readonly content: string | null;
  /** `choices[0].finish_reason` (`stop`, `length`, ...); null when no reply came. */
  readonly finishReason: string | null;
  readonly usage: { readonly promptTokens: number | null; readonly completionTokens: number | null } | null;
  /** The server marked `content` as its own fallback sentence, not the model's (`ternforge.fallback_content`). */
  readonly fallback: boolean;
  /** From sending the request to the end of the body, or to the abort. */
  readonly latencyMs: number;
  /** Aborted at the deadline. */
  readonly timedOut: boolean;
  /** HTTP status, when a response arrived. */
  readonly httpStatus: number | null;
  /** Transport failure, HTTP error or malformed reply; null for a well-formed reply. */
  readonly error: string | null;
}

/** What a question's outcome records of its request (eval-report QuestionOutcome): `length` is a cut reply. */
export function requestOutcome(c: Completion): { finishReason: string | null; truncated: boolean; timedOut: boolean; error: string | null; completionTokens: number | null; latencyMs: number } {
  return { finishReason: c.finishReason, truncated: c.finishReason === 'length', timedOut: c.timedOut, error: c.error, completionTokens: c.usage?.completionTokens ?? null, latencyMs: c.latencyMs };
}

/** The options merged over the grader's defaults. */
export function clientSettings(opts: ClientOptions): ClientSettings {
  const root = opts.baseUrl.replace(/\/+$/, '').replace(/\/v1$/, '');
  return {
    url: `${root}/v1/chat/completions`,
    model: opts.model ?? 'ternforge',
    concurrency: opts.concurrency ?? 16,
    maxTokens: opts.maxTokens ?? 4096,
    temperature: opts.temperature ?? 0,
    timeoutMs: opts.timeoutMs ?? 300_000,
    extraBody: opts.extraBody ?? {},
  };
}

const num = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? v : null);

/** Send one request; never throws for transport or server faults. */
export async function complete(req: ChatRequest, settings: ClientSettings, signal?: AbortSignal): Promise<Completion> {
  const body = { ...settings.extraBody, model: settings.model, messages: req.messages, max_tokens: settings.maxTokens, temperature: settings.temperature };
  return (await post(settings.url, req.id, body, settings.timeoutMs, signal)).completion;
}

/**
 * POST one chat-completions body as it is and settle what came back into a `Completion` (the reply's own
 * text too, when it was a well-formed 2xx); never throws for transport or server faults. `complete` builds
 * the grader's body; the harness's recorder (recorder.ts) forwards lm-eval's.
 */
export async function post(url: string, id: string, body: unknown, timeoutMs: number, signal?: AbortSignal): Promise<{ completion: Completion; reply: string | null }> {
  const deadline = AbortSignal.timeout(timeoutMs);
  const combined = signal === undefined ? deadline : AbortSignal.any([deadline, signal]);
  const started = performance.now();
  const base = { id, content: null, finishReason: null, usage: null, fallback: false };
  let httpStatus: number | null = null;
  const failed = (latencyMs: number, error: string, timedOut = false): { completion: Completion; reply: null } => ({ completion: { ...base, latencyMs, timedOut, httpStatus, error }, reply: null });
  try {
    const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal: combined });
    httpStatus = res.status;
    const text = await res.text();
    const latencyMs = performance.now() - started;
    if (!res.ok) return failed(latencyMs, `HTTP ${res.status}: ${text.slice(0, 300)}`);
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      return failed(latencyMs, `reply is not JSON: ${text.slice(0, 200)}`);
    }
    const reply = parsed as { choices?: Array<{ message?: { content?: unknown }; finish_reason?: unknown }>; usage?: Record<string, unknown> | null; ternforge?: { fallback_content?: unknown } };
    const choice = reply.choices?.[0];
    if (choice === undefined) return failed(latencyMs, 'reply has no choices');
    const content = choice.message?.content;
    const usage = reply.usage;
    const completion: Completion = {
      id,
      content: typeof content === 'string' ? content : null,
      finishReason: typeof choice.finish_reason === 'string' ? choice.finish_reason : null,
      usage: usage === undefined || usage === null ? null : { promptTokens: num(usage.prompt_tokens), completionTokens: num(usage.completion_tokens) },
      fallback: reply.ternforge?.fallback_content === true,
      latencyMs,
      timedOut: false,
      httpStatus,
      error: null,
    };
    return { completion, reply: text };
  } catch (e) {
    const latencyMs = performance.now() - started;
    const timedOut = deadline.aborted;
    const cause = (e as { cause?: { code?: string; message?: string } }).cause;
    const message = timedOut
      ? `no complete reply within ${timeoutMs} ms`
      : `${(e as Error).name}: ${(e as Error).message}${cause?.code !== undefined ? ` (${cause.code})` : ''}`;
    return failed(latencyMs, message, timedOut);
  }
}

/** Send every request, `concurrency` at a time; completions keep the requests' order. */
export async function completeAll(reqs: readonly ChatRequest[], opts: ClientOptions): Promise<{ settings: ClientSettings; completions: Completion[] }> {
  const settings = clientSettings(opts);
  const completions = await mapPool(reqs, settings.concurrency, (r) => complete(r, settings, opts.signal));
  return { settings, completions };
}
