/* Generated from schemas/stages/smoke-serve.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * The profile section of the smoke-serve stage (gates 4-6 of DESIGN.md).
 */
export interface SmokeServeParams {
  /**
   * max_tokens of the graded request and of each load request (the grader uses 4096; small on tiny).
   */
  max_tokens?: number;
  /**
   * Requests sent at once (the grader sends 16).
   */
  concurrency?: number;
  /**
   * Seconds each request may take (the grader allows 300).
   */
  deadline_s?: number;
  /**
   * Seconds from starting serve.sh to /health 200 (the grader allows 300).
   */
  startup_limit_s?: number;
  /**
   * Every reply must end with finish_reason stop (smol, the real model); on tiny the true counts are reported instead.
   */
  require_stop?: boolean;
  /**
   * Run serve.sh and the client in a network namespace with only loopback up: auto (when permitted; else record why), required, off.
   */
  network_namespace?: 'auto' | 'required' | 'off';
  /**
   * Interpreter serve.sh finds as python3 (its directory goes first on the clean PATH); default: the base interpreter of the workers' venv.
   */
  python?: string;
}
