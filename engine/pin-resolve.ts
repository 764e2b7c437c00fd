/**
 * Resolving pinned sources into the profile's lock, for a run (when it reaches the first stage with a
 * pending request, for that stage and every stage left: the keys hold what was locked) and for
 * `tsx pipeline.ts lock`. Every stage's hook is asked; the sources none of them could
 * resolve are listed in one `unresolvable-pins` failure, and a stage is written to the lock only when all
 * its sources resolved.
 */
import { relative } from 'node:path';
import type { Failure } from './failure.ts';
import { diffPins, type PinChange } from './pin-lock.ts';
import { err, ok, type Result } from './result.ts';
import type { Session } from './session.ts';

/**
 * Resolve, for each of `stages`, the requests without a standing entry (with `update`: every request),
 * and record them. Returns the per-source changes.
 */
export async function lockPending(s: Session, stages: readonly string[], update: boolean, signal: AbortSignal, note: (line: string) => void): Promise<Result<PinChange[], Failure>> {
  const changes: PinChange[] = [];
  const unresolved: Extract<Failure, { reason: 'unresolvable-pins' }>['sources'] = [];
  const shown = relative(s.root, s.pinLock.path);
  for (const stage of stages) {
    const requests = s.pinRequests(stage);
    const todo = update ? requests : s.pinLock.pending(stage, requests);
    if (todo.length === 0) {
      const before = { ...s.pinLock.entries(stage) };
      // Sources the profile no longer asks for leave the lock.
      if (Object.keys(before).some((n) => !requests.some((r) => r.name === n))) s.pinLock.update(stage, requests, {});
      changes.push(...diffPins(stage, before, s.pinLock.entries(stage)));
      continue;
    }
    note(`locking   ${stage}: ${todo.map((r) => `${r.name} (${r.repo}@${r.ref})`).join(', ')}`);
    const resolved = await s.resolvePins(stage, todo, signal, (line) => note(`[${stage}] ${line}`));
    if (!resolved.ok) {
      if (resolved.error.reason !== 'unresolvable-pins') return resolved;
      unresolved.push(...resolved.error.sources);
      continue;
    }
    const before = { ...s.pinLock.entries(stage) };
    s.pinLock.update(stage, requests, resolved.value);
    changes.push(...diffPins(stage, before, s.pinLock.entries(stage)));
    for (const r of todo) note(`locked    ${stage} ${r.name}: ${r.repo}@${r.ref} -> ${resolved.value[r.name]!.commit} (${shown})`);
  }
  if (unresolved.length > 0) return err({ reason: 'unresolvable-pins', lockPath: shown, sources: unresolved });
  return ok(changes);
}
