/* Generated from schemas/workers/worker-failure.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * A worker's `failure` event (python/ternforge/events.py): an expected refusal (bad revision, hash mismatch, a data rule, a bad config) with a kebab-case reason, a message naming what to fix, and the facts behind it.
 */
export interface WorkerFailureEvent {
  event: 'failure';
  reason: string;
  message: string;
}
