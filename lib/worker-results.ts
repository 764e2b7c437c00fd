/**
 * What the Python workers report, checked at the boundary before a stage reads a field of it. A worker's
 * `failure` event (an expected refusal) becomes `worker-refused`; its one `result` event must pass
 * `schemas/workers/<command>-result.schema.json`, else `worker-result-invalid` names the command and the
 * field. The types are the schemas' generated ones (npm run gen:types).
 */
import type { Failure } from '../engine/failure.ts';
import { engineSchemaSet } from '../engine/json-io.ts';
import { err, ok, type Result } from '../engine/result.ts';
import type { WorkerEvent } from '../engine/types.ts';
import type { FetchCalibResult } from '../schemas/generated/fetch-calib-result.ts';
import type { FetchModelResult } from '../schemas/generated/fetch-model-result.ts';
import type { HarnessResult } from '../schemas/generated/harness-result.ts';
import type { MathVerifyResult } from '../schemas/generated/math-verify-result.ts';
import type { FetchEvalResult } from '../schemas/generated/fetch-eval-result.ts';
import type { HubResolveFailure } from '../schemas/generated/hub-resolve-failure.ts';
import type { HubResolveResult } from '../schemas/generated/hub-resolve-result.ts';
import type { PreflightResult } from '../schemas/generated/preflight-result.ts';
import type { QualityResult } from '../schemas/generated/quality-result.ts';
import type { QuantizeResult } from '../schemas/generated/quantize-result.ts';
import type { WorkerFailureEvent } from '../schemas/generated/worker-failure.ts';
import type { WorkerOutcomeFailure } from './failures.ts';

/** Each worker command (python/ternforge/__main__.py COMMANDS) and the type of its checked result. */
export interface WorkerResults {
  'fetch-model': FetchModelResult;
  'fetch-calib': FetchCalibResult;
  'hub-resolve': HubResolveResult;
  quantize: QuantizeResult;
  quality: QualityResult;
  preflight: PreflightResult;
  harness: HarnessResult;
  'math-verify': MathVerifyResult;
  'fetch-eval': FetchEvalResult;
}
export type WorkerCommand = keyof WorkerResults;

/** The schema (relative to schemas/) each command's `result` event must pass. */
export const WORKER_RESULT_SCHEMAS: Readonly<Record<WorkerCommand, string>> = {
  'fetch-model': 'workers/fetch-model-result.schema.json',
  'fetch-calib': 'workers/fetch-calib-result.schema.json',
  'hub-resolve': 'workers/hub-resolve-result.schema.json',
  quantize: 'workers/quantize-result.schema.json',
  quality: 'workers/quality-result.schema.json',
  preflight: 'workers/preflight-result.schema.json',
  harness: 'workers/harness-result.schema.json',
  'math-verify': 'workers/math-verify-result.schema.json',
  'fetch-eval': 'workers/fetch-eval-result.schema.json',
};
/** The schema every `failure` event must pass, unless its command has its own below. */
export const WORKER_FAILURE_SCHEMA = 'workers/worker-failure.schema.json';
/** Commands whose refusals carry facts a stage reads (hub-resolve: the unresolvable sources). */
export const WORKER_FAILURE_SCHEMAS: Readonly<Partial<Record<WorkerCommand, string>>> = {
  'hub-resolve': 'workers/hub-resolve-failure.schema.json',
};
export type { HubResolveFailure };

/** The checked outcome of a finished worker: its result, or its refusal, or why its report is not trusted. */
export function checkWorkerOutcome<C extends WorkerCommand>(command: C, events: readonly WorkerEvent[]): Result<WorkerResults[C], WorkerOutcomeFailure> {
  const schemas = engineSchemaSet();
  const failure = events.find((e) => e.event === 'failure');
  if (failure !== undefined) {
    const schema = WORKER_FAILURE_SCHEMAS[command] ?? WORKER_FAILURE_SCHEMA;
    const errors = schemas.validate(schema, failure);
    if (errors.length > 0) return err({ reason: 'worker-result-invalid', command, schema: `schemas/${schema}`, errors: errors.map((e) => `failure event ${e}`) });
    const { event: _event, message, ...facts } = failure as unknown as WorkerFailureEvent;
    return err({ reason: 'worker-refused', command, message, facts });
  }
  const schema = WORKER_RESULT_SCHEMAS[command];
  const results = events.filter((e) => e.event === 'result');
  if (results.length !== 1) return err({ reason: 'worker-result-invalid', command, schema: `schemas/${schema}`, errors: [`${results.length} result events on stdout, expected exactly one`] });
  const errors = schemas.validate(schema, results[0]);
  if (errors.length > 0) return err({ reason: 'worker-result-invalid', command, schema: `schemas/${schema}`, errors });
  return ok(results[0] as unknown as WorkerResults[C]);
}

/** Run `python -m ternforge <command>` (after `launcher`, see StageContext.worker) through a stage's (or pin hook's) `worker` and check what it reported. */
export async function runWorkerCommand<C extends WorkerCommand>(
  w: { worker(command: string, config: unknown, launcher?: readonly string[]): Promise<Result<WorkerEvent[], Failure>> },
  command: C,
  config: unknown,
  launcher: readonly string[] = [],
): Promise<Result<WorkerResults[C], Failure | WorkerOutcomeFailure>> {
  const events = await w.worker(command, config, launcher);
  if (!events.ok) return events;
  return checkWorkerOutcome(command, events.value);
}

/** One JSON line a Python process printed (not a worker command: e.g. python-env's version probe), checked against `schema`. */
export function checkPythonJson<T>(what: string, schema: string, line: string | undefined): Result<T, WorkerOutcomeFailure> {
  let value: unknown;
  try {
    value = JSON.parse(line ?? '');
  } catch (e) {
    return err({ reason: 'worker-result-invalid', command: what, schema: `schemas/${schema}`, errors: [`not JSON: ${(e as Error).message}: ${JSON.stringify(line ?? '')}`] });
  }
  const errors = engineSchemaSet().validate(schema, value);
  if (errors.length > 0) return err({ reason: 'worker-result-invalid', command: what, schema: `schemas/${schema}`, errors });
  return ok(value as T);
}
