import type { LockedSource, PinRequest } from '../engine/pin-lock.ts';
import { err, ok, type Result } from '../engine/result.ts';
import type { Failure } from '../engine/failure.ts';
import type { PinEnv } from '../engine/types.ts';

/**
 * The pin resolver of the fetch stages: the Python worker command `hub-resolve`
 * (python/ternforge/sources/hub_lock.py) asks the hub, through huggingface_hub, for the commit each
 * requested ref points at and each file's size and sha256 (LFS) or git blob sha1. Every request is tried;
 * the worker's `failure` event lists all that failed, which becomes one `unresolvable-pins` failure.
 */
export async function resolveHubPins(requests: readonly PinRequest[], env: PinEnv): Promise<Result<Record<string, LockedSource>, Failure>> {
  const result = await env.worker('hub-resolve', { sources: requests });
  if (!result.ok) return result;
  const failure = result.value.find((e) => e.event === 'failure');
  if (failure !== undefined) {
    const sources = (failure['unresolvable'] as Array<{ name: string; repo: string; ref: string; error: string }> | undefined) ?? [];
    return err({ reason: 'unresolvable-pins', lockPath: env.lockPath, sources: sources.map((s) => ({ stage: env.stage, ...s })) });
  }
  const final = result.value.find((e) => e.event === 'result');
  const sources = final?.['sources'] as Record<string, LockedSource> | undefined;
  if (sources === undefined) return err({ reason: 'stage-failed', stage: env.stage, detail: 'hub-resolve returned no sources' });
  return ok(sources);
}
