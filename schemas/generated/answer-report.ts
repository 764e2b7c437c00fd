/* Generated from schemas/answer-report.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * One run of an answer set (answer-set.schema.json) against one served endpoint (lib/eval/answers.ts): every question asked greedily, scored by lib/eval/answer-score.ts, tabulated per kind.
 */
export interface AnswerReport {
  /**
   * Report layout version.
   */
  version: 1;
  /**
   * Which file was asked, exactly (sha256).
   */
  set: {
    name: string;
    path: string;
    sha256: string;
    role: 'evaluation';
    questions: number;
  };
  settings: ClientSettings;
  wallMs: number;
  /**
   * One row per kind in the set's order, then `all`.
   */
  rows: KindRow[];
  outcomes: AnswerOutcome[];
}
/**
 * The settings every request used (lib/eval/client.ts).
 */
export interface ClientSettings {
  url: string;
  model: string;
  concurrency: number;
  maxTokens: number;
  temperature: number;
  timeoutMs: number;
  /**
   * Extra request body fields (a sweep's parameter).
   */
  extraBody: {
    [k: string]: unknown;
  };
}
/**
 * One kind's figures.
 */
export interface KindRow {
  kind: string;
  questions: number;
  correct: number;
  /**
   * correct / questions.
   */
  accuracy: number;
  /**
   * Replies cut off at `max_tokens` (they score zero).
   */
  truncations: number;
}
/**
 * One asked question.
 */
export interface AnswerOutcome {
  id: string;
  kind: string;
  /**
   * Right by answer-score.ts, and the reply ended by itself in time without error.
   */
  correct: boolean;
  extracted: string | null;
  others: string[];
  /**
   * Why the reply scored zero before it was read, or null.
   */
  zeroReason: 'timeout' | 'error' | 'truncated' | null;
  finishReason: string | null;
  completionTokens: number | null;
  latencyMs: number;
  /**
   * The reply's answer text (or the request's error), up to 300 characters.
   */
  reply: string;
}
