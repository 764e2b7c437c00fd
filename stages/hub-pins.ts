import type { LockedSource, PinRequest } from '../engine/pin-lock.ts';
import { err, ok, type Result } from '../engine/result.ts';
import type { Failure } from '../engine/failure.ts';
import type { PinEnv } from '../engine/types.ts';
import { asEngineFailure } from '../lib/failures.ts';
import { runWorkerCommand, type HubResolveFailure } from '../lib/worker-results.ts';

/**
 * The pin resolver of the fetch stages: the Python worker command `hub-resolve`
 * (python/ternforge/sources/hub_lock.py) asks the hub, through huggingface_hub, for the commit each
 * requested ref points at and each file's size and sha256 (LFS) or git blob sha1. Every request is tried;
 * the worker's `failure` event lists all that failed, which becomes one `unresolvable-pins` failure.
 */
export async function resolveHubPins(requests: readonly PinRequest[], env: PinEnv): Promise<Result<Record<string, LockedSource>, Failure>> {
  const result = await runWorkerCommand(env, 'hub-resolve', { sources: requests });
  if (!result.ok) {
    const f = result.error;
    // The refusal passed schemas/workers/hub-resolve-failure.schema.json: it lists every unresolvable source.
    if (f.reason === 'worker-refused') {
      const sources = (f.facts as Omit<HubResolveFailure, 'event' | 'message'>).unresolvable;
      return err({ reason: 'unresolvable-pins', lockPath: env.lockPath, sources: sources.map((s) => ({ stage: env.stage, ...s })) });
    }
    return err(asEngineFailure(env.stage, f));
  }
  return ok(result.value.sources);
}
