/* Generated from schemas/smoke-report.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * smoke.json, written by smoke-serve: serve.sh started from the emitted directory in a clean environment, and gates 4-6 of DESIGN.md measured against it. Figures are true measurements; finish_reason counts are reported as the server returned them.
 */
export interface SmokeReport {
  format: 'ternforge-smoke/1';
  passed: boolean;
  failed_gates: (4 | 5 | 6)[];
  /**
   * Whether serve.sh and the client ran in a network namespace with only loopback up (no network at all), and if not, why.
   */
  isolation: {
    network_namespace: boolean;
    method?: string;
    reason?: string;
  };
  /**
   * The complete environment serve.sh started with; the scratch directory is written `<scratch>` and the interpreter's directory `<python>`, so no path of the build machine appears.
   */
  environment: {
    [k: string]: string;
  };
  params: {
    max_tokens: number;
    concurrency: number;
    deadline_s: number;
    startup_limit_s: number;
    require_stop: boolean;
  };
  gates: Gate[];
  /**
   * Gate 4: seconds from starting serve.sh to the first answer and to the first 200 of /health.
   */
  startup: {
    first_answer_s?: number | null;
    health_200_s: number | null;
    /**
     * serve.sh's exit code when it ended before /health turned 200.
     */
    exited?: number | null;
    /**
     * The server's own start-up phase timings in seconds (install, load, dequantize, warmup, ...), from its start-up report.
     */
    phases?: {
      [k: string]: number;
    };
    /**
     * The server's start-up report, as written.
     */
    report?: {};
  };
  /**
   * Gate 5, first half: one request as graded (temperature 0, max_tokens from params).
   */
  graded: Reply | null;
  /**
   * Gate 5, second half: concurrent requests sent at once.
   */
  load: {
    concurrency: number;
    wall_s: number;
    /**
     * Replies well-formed within the deadline.
     */
    ok: number;
    /**
     * Count by finish_reason as returned (null counted as "null").
     */
    finish_reasons: {
      [k: string]: number;
    };
    completion_tokens?: number;
    /**
     * Completion tokens of all replies over the wall time.
     */
    tokens_per_s?: number;
    latency_s?: {
      min?: number;
      p50?: number;
      max?: number;
    };
    replies: Reply[];
    /**
     * /health probed every 250 ms while the load ran.
     */
    health_during: {
      probes: number;
      failures: number;
      p50_ms?: number;
      p99_ms?: number;
      max_ms?: number;
    };
  } | null;
  /**
   * Gate 6: /health once the load is done.
   */
  health_after: {
    status: number | null;
    latency_ms: number;
    problem?: string;
  } | null;
  server: {
    /**
     * The last lines serve.sh and the server wrote.
     */
    log_tail: string;
    /**
     * How the server's process group was ended.
     */
    stopped_by?: string;
    /**
     * Top-level paths serve.sh created inside the (writable copy of the) submission directory.
     */
    wrote_into_submission?: string[];
  };
}
export interface Gate {
  gate: 4 | 5 | 6;
  name: 'start-up' | 'load' | 'health-after-load';
  status: 'passed' | 'failed' | 'not-run';
  detail?: string;
}
/**
 * One chat completion as the client saw it.
 */
export interface Reply {
  index: number;
  /**
   * Well-formed within the deadline: HTTP 200, non-empty string content, a finish_reason (and stop when required).
   */
  ok: boolean;
  /**
   * HTTP status (absent when no response came).
   */
  status?: number;
  latency_s: number;
  finish_reason?: string | null;
  content_chars?: number;
  completion_tokens?: number;
  /**
   * Why the reply is not ok.
   */
  problem?: string;
  /**
   * The first characters of content, for a reader.
   */
  content_head?: string;
}
