/**
 * What a Python worker reports is checked at the boundary (lib/worker-results.ts): a real worker process
 * (the engine fixture's `ternforge`, which prints the lines it is given, and the project's own `quantize`)
 * whose result is off its schema, missing, or whose refusal is malformed is refused with the command, the
 * schema and the field named.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { formatFailure } from '../engine/format-failure.ts';
import { runWorker } from '../engine/worker.ts';
import type { Failure } from '../engine/failure.ts';
import type { Result } from '../engine/result.ts';
import { asEngineFailure, formatStageFailure, isStageFailure, type StageFailure } from '../lib/failures.ts';
import { checkPythonJson, runWorkerCommand, WORKER_RESULT_SCHEMAS, type WorkerCommand } from '../lib/worker-results.ts';

const REPO = join(import.meta.dirname, '..');
const FIXTURE_ROOT = join(REPO, 'test', 'fixtures', 'engine', 'root');
const PYTHON = join(process.env.TERNFORGE_VENV || join(REPO, '.ternforge', 'venv'), 'bin', 'python');
const tmp = mkdtempSync(join(tmpdir(), 'ternforge-worker-results-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

/** `python -m ternforge <command>` in `root`, through the engine's worker and the boundary check. */
function run<C extends WorkerCommand>(command: C, config: unknown, root = FIXTURE_ROOT) {
  const opts = { stage: 'test', python: PYTHON, root, tmpDir: tmp, signal: new AbortController().signal, log: () => {} };
  return runWorkerCommand({ worker: (c, cfg) => runWorker(opts, c, cfg) }, command, config);
}
/** The failure's text as the stage prints it (after `stage <name> failed: `), or null on success. */
const said = (r: Result<unknown, Failure | StageFailure>): string | null => (r.ok ? null : isStageFailure(r.error) ? formatStageFailure(r.error) : formatFailure(r.error));
const lines = (...events: object[]): { lines: string[] } => ({ lines: events.map((e) => JSON.stringify(e)) });
const QUANTIZE_OK = { event: 'result', ok: true, method: 'gptq', files: ['interchange-00001-of-00001.safetensors'], totals: { ternary_tensors: 25 }, ternary_fraction_incl_embedding: 0.9, ternary_fraction: 0.96 };

describe('worker results at the boundary', () => {
  test('a result that passes its schema comes back typed', async () => {
    const r = await run('quantize', lines({ event: 'progress', done: 1, total: 1 }, QUANTIZE_OK));
    expect(r).toEqual({ ok: true, value: QUANTIZE_OK });
  });

  test('a result missing a figure, or with one of the wrong type, is refused naming the command, the schema and the field', async () => {
    const { ternary_fraction: _dropped, ...rest } = QUANTIZE_OK;
    const r = await run('quantize', lines({ ...rest, files: 'interchange-00001-of-00001.safetensors' }));
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.error).toEqual({
      reason: 'worker-result-invalid',
      command: 'quantize',
      schema: 'schemas/workers/quantize-result.schema.json',
      errors: ["/ must have required property 'ternary_fraction'", '/files must be array'],
    });
    // As the user sees it, through the engine's one `stage-failed`.
    expect(formatFailure(asEngineFailure('quantize', r.error))).toBe(
      "stage quantize failed: the quantize worker's result fails schemas/workers/quantize-result.schema.json:\n  / must have required property 'ternary_fraction'\n  /files must be array",
    );
  });

  test('a figure out of range is refused (a ternary fraction above 1)', async () => {
    const r = await run('quality', lines({ event: 'result', quality: 'quality.json', ppl: 12.5, ppl_reference: 10, ppl_ratio: 1.25, top1_agreement: 1.5, kl: 0.1 }));
    expect(said(r)).toBe("the quality worker's result fails schemas/workers/quality-result.schema.json:\n  /top1_agreement must be <= 1");
  });

  test('no result event, or two, is refused', async () => {
    const none = await run('fetch-calib', lines({ event: 'progress', done: 1, total: 2 }));
    expect(none.ok ? null : none.error).toMatchObject({ reason: 'worker-result-invalid', command: 'fetch-calib', errors: ['0 result events on stdout, expected exactly one'] });
    const two = await run('quantize', lines(QUANTIZE_OK, QUANTIZE_OK));
    expect(two.ok ? null : two.error).toMatchObject({ reason: 'worker-result-invalid', errors: ['2 result events on stdout, expected exactly one'] });
  });

  test('a refusal is `worker-refused` with its message and facts; a malformed one is refused itself', async () => {
    const refused = await run('fetch-model', lines({ event: 'failure', reason: 'hash-mismatch', message: 'hash-mismatch: org/model@abc: model.safetensors', expected: 'aa', actual: 'bb' }, { event: 'result', ok: false }));
    expect(refused.ok ? null : refused.error).toEqual({ reason: 'worker-refused', command: 'fetch-model', message: 'hash-mismatch: org/model@abc: model.safetensors', facts: { reason: 'hash-mismatch', expected: 'aa', actual: 'bb' } });
    expect(said(refused)).toBe('hash-mismatch: org/model@abc: model.safetensors\n  reason: hash-mismatch\n  expected: aa\n  actual: bb');
    const malformed = await run('fetch-model', lines({ event: 'failure', reason: 'hash-mismatch' }));
    expect(malformed.ok ? null : malformed.error).toEqual({ reason: 'worker-result-invalid', command: 'fetch-model', schema: 'schemas/workers/worker-failure.schema.json', errors: ["failure event / must have required property 'message'"] });
    // hub-resolve's refusal must list the unresolvable sources (the engine reports each one).
    const hub = await run('hub-resolve', lines({ event: 'failure', reason: 'unresolvable-sources', message: '1 source cannot be resolved' }));
    expect(hub.ok ? null : hub.error).toMatchObject({ reason: 'worker-result-invalid', schema: 'schemas/workers/hub-resolve-failure.schema.json', errors: ["failure event / must have required property 'unresolvable'"] });
  });

  test("a hub-resolve result's lock entry must be a LockedSource (commit of 40 hex digits)", async () => {
    const r = await run('hub-resolve', lines({ event: 'result', ok: true, sources: { model: { request: { name: 'model', kind: 'model', repo: 'org/m', ref: 'main' }, commit: 'main', files: {} } } }));
    expect(r.ok ? null : r.error).toMatchObject({ reason: 'worker-result-invalid', errors: ['/sources/model/commit must match pattern "^[0-9a-f]{40}$"'] });
  });

  test("the project's own quantize worker refuses an unknown method with a failure event that passes its schema", async () => {
    const r = await run('quantize', { method: 'nope', group_size: 32 }, REPO);
    expect(r.ok ? null : r.error).toMatchObject({ reason: 'worker-refused', command: 'quantize', message: "unknown-method: unknown quantization method 'nope'", facts: { reason: 'unknown-method', actual: 'nope' } });
  }, 120_000);

  test('every worker command of python/ternforge/__main__.py has a result schema, and no schema names a command that is not there', () => {
    const main = readFileSync(join(REPO, 'python', 'ternforge', '__main__.py'), 'utf8');
    const block = main.slice(main.indexOf('COMMANDS'), main.indexOf('}', main.indexOf('COMMANDS')));
    const commands = [...block.matchAll(/^\s+"([a-z-]+)":/gm)].map((m) => m[1]).sort();
    expect(commands.length).toBeGreaterThanOrEqual(5);
    expect(Object.keys(WORKER_RESULT_SCHEMAS).sort()).toEqual(commands);
  });

  test("python-env's version probe is checked too: a line that is not JSON, or lacks a field, is refused", () => {
    const schema = 'workers/python-versions.schema.json';
    expect(checkPythonJson('python-env version probe', schema, '{"python": "3.11.7", "torch": "2.13.0+cpu", "transformers": null, "kernels": null}')).toEqual({ ok: true, value: { python: '3.11.7', torch: '2.13.0+cpu', transformers: null, kernels: null } });
    expect(checkPythonJson('python-env version probe', schema, '{"python": "3.11.7", "torch": null, "kernels": null}')).toMatchObject({ ok: false, error: { reason: 'worker-result-invalid', errors: ["/ must have required property 'transformers'"] } });
    // the kernels record (python/ternforge/kernels.py): all four functions named, fast_path a boolean
    const kernels = { distributions: { 'flash-linear-attention': '0.6.0' }, selected: { chunk_gated_delta_rule: 'fla.ops.gated_delta_rule.chunk', fused_recurrent_gated_delta_rule: 'fla.ops.gated_delta_rule.fused_recurrent', causal_conv1d_fn: 'torch', causal_conv1d_update: 'torch' }, fast_path: true };
    const line = (k: unknown): string => JSON.stringify({ python: '3.12.3', torch: '2.10.0', transformers: '5.24.0', kernels: k });
    expect(checkPythonJson('python-env version probe', schema, line(kernels)).ok).toBe(true);
    const noConv = { ...kernels, selected: { chunk_gated_delta_rule: 'torch', fused_recurrent_gated_delta_rule: 'torch' } };
    expect(checkPythonJson('python-env version probe', schema, line(noConv)).ok).toBe(false);
    const notJson = checkPythonJson('python-env version probe', schema, 'Traceback (most recent call last):');
    expect(said(notJson)).toMatch(/^the python-env version probe worker's result fails schemas\/workers\/python-versions\.schema\.json:\n {2}not JSON: /);
  });
});
