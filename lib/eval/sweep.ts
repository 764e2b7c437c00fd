/**
 * Choosing a default (such as the reasoning budget) by measurement, on `selection` data only.
 *
 * DESIGN §3: nothing with the role `evaluation` may reach any choice of defaults, so `sweep` checks
 * every set's declared role before it measures anything and refuses with `eval-role-refused`. The
 * record it returns (the choice, the rule, every measured point, the sets by hash) is evidence.
 *
 * Rule: the highest mean normalised score wins; ties go to the higher mean raw accuracy (the
 * normalised score clamps at chance, which hides differences on weak models), then to fewer
 * truncations, then to the smaller value (cheaper).
 */
import type { EvalFailure } from '../failures.ts';
import { err, ok, type Result } from '../../engine/result.ts';
import type { LoadedSet } from './questions.ts';
import { runEval, type EvalReport, type RunEvalOptions } from './run.ts';
import type { SweepPoint, SweepRecord } from '../../schemas/generated/sweep-record.ts';
export type { SweepPoint, SweepRecord };

/** The only role a sweep accepts. */
export const SWEEP_ROLES = ['selection'] as const;

export const SWEEP_RULE =
  'max mean normalised score; ties: max mean raw accuracy, then fewest truncations, then smallest value';

export interface SweepOptions {
  /** The parameter's name, as recorded (and, with `requestFieldMeasure`, the request field). */
  parameter: string;
  /** Values to measure, in the order given. */
  values: readonly number[];
  /** Question sets; every one must have the role `selection`. */
  sets: readonly LoadedSet[];
  /** Measure one value on the sets. */
  measure: (value: number, sets: readonly LoadedSet[]) => Promise<EvalReport>;
}

/** Refuse any set whose declared role is not `selection`; the first offender is reported. */
export function checkSelectionOnly(sets: readonly LoadedSet[]): Result<void, EvalFailure> {
  for (const s of sets) {
    if (!(SWEEP_ROLES as readonly string[]).includes(s.set.role)) {
      return err({ reason: 'eval-role-refused', path: s.path, set: s.set.name, role: s.set.role, allowed: [...SWEEP_ROLES] });
    }
  }
  return ok(undefined);
}

function point(value: number, report: EvalReport): SweepPoint {
  const rows = report.table.rows;
  const tokens = report.questions.map((q) => q.completionTokens).filter((t): t is number => t !== null);
  return {
    value,
    meanScore: report.table.meanScore,
    meanAccuracy: rows.length === 0 ? 0 : rows.reduce((a, r) => a + r.accuracy, 0) / rows.length,
    truncations: rows.reduce((a, r) => a + r.truncations, 0),
    timeouts: rows.reduce((a, r) => a + r.timeouts, 0),
    meanCompletionTokens: tokens.length === 0 ? null : tokens.reduce((a, b) => a + b, 0) / tokens.length,
    table: report.table,
  };
}

const EPS = 1e-9;
/** Negative when `a` is the better choice. */
function compare(a: SweepPoint, b: SweepPoint): number {
  if (Math.abs(a.meanScore - b.meanScore) > EPS) return b.meanScore - a.meanScore;
  if (Math.abs(a.meanAccuracy - b.meanAccuracy) > EPS) return b.meanAccuracy - a.meanAccuracy;
  if (a.truncations !== b.truncations) return a.truncations - b.truncations;
  return a.value - b.value;
}

/** Measure every value on selection sets and choose one (see the module comment for the rule). */
export async function sweep(opts: SweepOptions): Promise<Result<SweepRecord, EvalFailure>> {
  if (opts.sets.length === 0) return err({ reason: 'sweep-invalid', parameter: opts.parameter, detail: 'no question sets' });
  if (opts.values.length === 0) return err({ reason: 'sweep-invalid', parameter: opts.parameter, detail: 'no values to measure' });
  if (new Set(opts.values).size !== opts.values.length) {
    return err({ reason: 'sweep-invalid', parameter: opts.parameter, detail: `repeated value in ${JSON.stringify(opts.values)}` });
  }
  const roles = checkSelectionOnly(opts.sets);
  if (!roles.ok) return roles;
  const points: SweepPoint[] = [];
  for (const value of opts.values) points.push(point(value, await opts.measure(value, opts.sets)));
  const chosen = [...points].sort(compare)[0]!.value;
  return ok({
    parameter: opts.parameter,
    chosen,
    rule: SWEEP_RULE,
    points,
    sets: opts.sets.map((s) => ({ name: s.set.name, path: s.path, sha256: s.sha256, role: s.set.role, source: s.set.source })),
  });
}

/** A `measure` that runs `runEval` with the value sent as request body field `field`. */
export function requestFieldMeasure(base: Omit<RunEvalOptions, 'sets' | 'extraBody'>, field: string): SweepOptions['measure'] {
  return (value, sets) => runEval({ ...base, sets, extraBody: { [field]: value } });
}
