/**
 * MATH answers scored by math-verify 0.9.0 (python/ternforge/mathcheck.py), the checker lm-eval's minerva_math500
 * task, lighteval and open-r1 use: the reply parsed as it is, the reference as `$\boxed{reference}$`. The
 * harness path (harness.ts) gets math-verify's verdicts inside lm-eval's samples; lib/eval/run.ts (a sweep's
 * own client) asks the worker through this, one batch per run. Where math-verify's verdict differs from one by
 * hand on the cases the retired hand-written checker held, python/tests/test_mathcheck.py documents and pins it.
 */
import type { Failure } from '../../engine/failure.ts';
import { err, ok, type Result } from '../../engine/result.ts';
import type { WorkerEvent } from '../../engine/types.ts';
import type { MathVerifyResult } from '../../schemas/generated/math-verify-result.ts';
import type { WorkerOutcomeFailure } from '../failures.ts';
import { runWorkerCommand } from '../worker-results.ts';

export type MathVerdict = MathVerifyResult['verdicts'][number];

/** Verdicts on (reply, reference) pairs, in order. */
export type MathVerifier = (pairs: ReadonlyArray<{ reply: string; reference: string }>) => Promise<Result<MathVerdict[], Failure | WorkerOutcomeFailure>>;

/** A verifier that runs `python -m ternforge math-verify` through `w` (a stage's context, or `runWorker`). */
export function workerMathVerifier(w: { worker(command: string, config: unknown): Promise<Result<WorkerEvent[], Failure>> }): MathVerifier {
  return async (pairs) => {
    if (pairs.length === 0) return ok([]);
    const r = await runWorkerCommand(w, 'math-verify', { pairs });
    if (!r.ok) return r;
    if (r.value.verdicts.length !== pairs.length) return err({ reason: 'worker-result-invalid', command: 'math-verify', schema: 'schemas/workers/math-verify-result.schema.json', errors: [`${r.value.verdicts.length} verdicts for ${pairs.length} pairs`] });
    return ok(r.value.verdicts);
  };
}
