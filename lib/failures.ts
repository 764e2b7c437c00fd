/**
 * Every expected failure of the stages' own work (packing, the audit, wheels, the submission, the evidence,
 * eval, the smoke test, the Python workers' refusals), as one union keyed by a kebab-case `reason` like the
 * engine's Failure, and the one place each becomes text: `formatStageFailure`, an exhaustive switch.
 *
 * Library code returns these (narrowed to its own sub-union: PackFailure, SourceFailure, ...); a stage hands
 * one to the engine with `stageFailed(stage, f)`, which wraps it in the engine's single `stage-failed`
 * variant with its text. The engine's own failures (engine/failure.ts) are only what the engine knows:
 * missing inputs and code, invalid JSON, a worker that crashed, the lock, an interrupt.
 *
 * Every variant names what a user must look at: the file, the tensor, the requirement or the field.
 */
import type { Failure } from '../engine/failure.ts';
import { err, unreachable } from '../engine/result.ts';
import { describeSafetensorsError, type SafetensorsErrorFacts } from './safetensors/errors.ts';
// Types from the schemas only: the vocabulary sits below every library file it describes (none imports back).
import type { GateName, Violation } from '../schemas/generated/audit-report.ts';
import type { EvidenceGuide } from '../schemas/generated/evidence-guide.ts';
import type { WheelsRecord } from '../schemas/generated/wheels-record.ts';

type ProvenanceViolation = EvidenceGuide['provenance']['violations'][number];
type CudaRecord = NonNullable<WheelsRecord['cuda']>;

/** pack refuses its input (quantize's interchange); nothing is left written when one occurs. */
export type PackFailure =
  /** index.json is missing, not JSON, or fails schemas/interchange-index.schema.json. */
  | { reason: 'invalid-interchange-index'; path: string; errors: string[] }
  /** A safetensors file of the interchange failed the strict reader. */
  | { reason: 'invalid-safetensors'; error: SafetensorsErrorFacts }
  /** index.json names a tensor (or a ternary tensor's `.scale`) that its file does not hold. */
  | { reason: 'interchange-tensor-missing'; tensor: string; file: string }
  /** A stored tensor's dtype or shape differs from what index.json (or the ternary contract) says. */
  | { reason: 'interchange-tensor-mismatch'; tensor: string; file: string; field: 'dtype' | 'shape'; expected: string; actual: string }
  /** A safetensors file holds a tensor index.json does not account for. */
  | { reason: 'unexpected-tensor'; tensor: string; file: string }
  /** A ternary tensor has no group_size. */
  | { reason: 'missing-group-size'; tensor: string }
  /** g is not a positive multiple of 4 dividing the row length. */
  | { reason: 'invalid-group-size'; tensor: string; groupSize: number; rowLength: number }
  /** `<name>.scale` is not F32 [out, in / g]. */
  | { reason: 'scale-shape-mismatch'; tensor: string; expected: string; actual: string }
  /** An I8 code outside {-1, 0, 1}. */
  | { reason: 'invalid-ternary-value'; tensor: string; row: number; col: number; value: number }
  /** The embedding is tied but the interchange also holds a separate output head. */
  | { reason: 'tied-head-present'; tensor: string; tiedTo: string };

/** The source checkpoint (fetch-model's, or the one architecture.json describes) cannot be read. */
export type SourceFailure =
  /** A safetensors file of the checkpoint failed the strict reader. */
  | { reason: 'invalid-source-checkpoint'; dir: string; error: SafetensorsErrorFacts }
  /** config.json (or architecture.json's source_tensors) is not what it must be. */
  | { reason: 'invalid-source-config'; path: string; detail: string };

/** vendor-wheels cannot produce an offline-installable wheel set; each names what to fix. */
export type WheelsFailure =
  /** The resolver found no wheel set satisfying the requirements for the target. */
  | { reason: 'requirements-unresolvable'; target: string; requirements: string[]; detail: string }
  /** A locked wheel could not be downloaded for the target. */
  | { reason: 'wheel-unavailable'; target: string; requirements: string[]; detail: string }
  /** A downloaded or cached file's sha256 is not one the index lists. */
  | { reason: 'wheel-hash-mismatch'; filename: string; expected: string[]; actual: string }
  /** A tool (uv, python) could not be run. */
  | { reason: 'tool-failed'; command: string; detail: string }
  /** The resolved set's CUDA runtime cannot be read (a version whose major is not its package's, an unknown driver). */
  | { reason: 'cuda-unknown'; detail: string }
  /** The profile wants one CUDA major; the resolved set carries another, or none. */
  | { reason: 'cuda-mismatch'; wanted: number; torch: string | null; cuda: CudaRecord | null }
  /** The offline install from wheels/ does not resolve: the requirements it misses, and each failed check's detail. */
  | { reason: 'offline-install-unproven'; missing: string[]; checks: Record<string, string> }
  /** The headers lock (python_headers) has no entry for the target's CPython, or is not what it must be. */
  | { reason: 'python-headers-unpinned'; lock: string; python: string; detail: string }
  /** The pinned headers package could not be downloaded, or is not the pinned bytes, or holds no headers. */
  | { reason: 'python-headers-invalid'; url: string; detail: string };

/** emit cannot assemble the submission. */
export type AssemblyFailure =
  /** An input the contract needs does not exist. */
  | { reason: 'submission-input-missing'; path: string; detail: string }
  /** An input exists but is not what the contract says (bad JSON, extra shard, stray file). */
  | { reason: 'submission-input-invalid'; path: string; detail: string };

/** The evidence records cannot be gathered (report). */
export type RecordsFailure =
  /** A record is missing. */
  | { reason: 'evidence-record-missing'; stage: string; path: string }
  /** A record fails its schema or names another stage or profile. */
  | { reason: 'evidence-record-invalid'; stage: string; path: string; errors: string[] }
  /** A record's upstream digest is not the output digest of the record it points at. */
  | { reason: 'evidence-chain-broken'; stage: string; upstream: string; expected: string; actual: string };

/** A question set or a sweep breaks a rule (eval). */
export type EvalFailure =
  /** A question set broke a rule its schema cannot state (answer letter beyond the options, duplicate id). */
  | { reason: 'eval-question-invalid'; path: string; id: string; detail: string }
  /** A sweep (choosing a default) was given a question set whose role is not `selection`. */
  | { reason: 'eval-role-refused'; path: string; set: string; role: string; allowed: string[] }
  /** A sweep was configured with no values, a repeated value, or no sets. */
  | { reason: 'sweep-invalid'; parameter: string; detail: string }
  /** The emitted server exited, or did not answer /health, before the limit. */
  | { reason: 'server-not-ready'; detail: string; logTail: string };

/** The report cannot stand behind the evidence. */
export type ReportFailure =
  /** The provenance proof found data that breaks the rules (benchmark data or a held-out split outside `evaluation`, evaluation data reaching the submission). */
  | { reason: 'provenance-violation'; manifest: string; violations: ProvenanceViolation[] }
  /** A cited anchor is gone, a file the report needs is absent or unreadable, or a rule's check is contradicted. */
  | { reason: 'evidence-unverifiable'; detail: string; items: string[] };

/** What a Python worker (`python -m ternforge <command>`) reported, when it is a refusal or is not what its schema says. */
export type WorkerOutcomeFailure =
  /** The worker refused with a `failure` event (bad revision, hash mismatch, a data rule): its message and facts. */
  | { reason: 'worker-refused'; command: string; message: string; facts: Record<string, unknown> }
  /** The worker's `result` event is missing or fails schemas/workers/<command>-result.schema.json. */
  | { reason: 'worker-result-invalid'; command: string; schema: string; errors: string[] }
  /**
   * A rank of a torchrun launch (quantize.launch) died and torchrun ended the others: the first rank to fail
   * as torchrun reports it, its exit code (negative: the signal), torchrun's cause line, and the rank's own
   * last log lines (lib/torchrun.ts rankFailure).
   */
  | { reason: 'worker-rank-failed'; command: string; rank: number; worldSize: number; exitCode: number | null; cause: string; rankLog: string[] };

/** The submission fails a gate (audit: gates 1-3; smoke-serve: gates 4-6). */
export type GateFailure =
  /** The audit found violations: one line per failed gate, the first violations, and the figures. */
  | { reason: 'audit-gates-failed'; failedGates: GateName[]; lines: string[]; violations: Violation[]; figures: Record<string, unknown> }
  /** The smoke test could not run at all (no interpreter, no scratch, no port). */
  | { reason: 'smoke-not-run'; detail: string }
  /** serve.sh started but a gate failed: each failed gate with its detail, the figures and the log's tail. */
  | { reason: 'smoke-gates-failed'; gates: Array<{ gate: number; name: string; detail: string }>; figures: Record<string, unknown>; serveLogTail: string };

/** Every expected failure of stage code. */
export type StageFailure = PackFailure | SourceFailure | WheelsFailure | AssemblyFailure | RecordsFailure | EvalFailure | ReportFailure | WorkerOutcomeFailure | GateFailure;
export type StageFailureReason = StageFailure['reason'];

/** Each reason once (the Record type makes the list exhaustive): tells a stage failure from an engine one. */
const STAGE_REASONS: Readonly<Record<StageFailureReason, true>> = {
  'invalid-interchange-index': true, 'invalid-safetensors': true, 'interchange-tensor-missing': true, 'interchange-tensor-mismatch': true,
  'unexpected-tensor': true, 'missing-group-size': true, 'invalid-group-size': true, 'scale-shape-mismatch': true, 'invalid-ternary-value': true,
  'tied-head-present': true, 'invalid-source-checkpoint': true, 'invalid-source-config': true, 'requirements-unresolvable': true,
  'wheel-unavailable': true, 'wheel-hash-mismatch': true, 'tool-failed': true, 'cuda-unknown': true, 'cuda-mismatch': true,
  'offline-install-unproven': true, 'python-headers-unpinned': true, 'python-headers-invalid': true, 'submission-input-missing': true, 'submission-input-invalid': true, 'evidence-record-missing': true,
  'evidence-record-invalid': true, 'evidence-chain-broken': true, 'eval-question-invalid': true, 'eval-role-refused': true, 'sweep-invalid': true,
  'server-not-ready': true, 'provenance-violation': true, 'evidence-unverifiable': true, 'worker-refused': true, 'worker-result-invalid': true, 'worker-rank-failed': true,
  'audit-gates-failed': true, 'smoke-not-run': true, 'smoke-gates-failed': true,
};

export function isStageFailure(f: Failure | StageFailure): f is StageFailure {
  return Object.hasOwn(STAGE_REASONS, f.reason);
}

/** `key: value` lines under a failure's first line (strings as they are, the rest as JSON). */
function factLines(facts: Record<string, unknown>): string {
  const lines = Object.entries(facts).map(([k, v]) => `\n  ${k}: ${typeof v === 'string' ? v : JSON.stringify(v)}`);
  return lines.join('');
}

/** The one place a StageFailure becomes text. Adding a variant without a case here fails the type check. */
export function formatStageFailure(f: StageFailure): string {
  switch (f.reason) {
    case 'invalid-interchange-index':
      return `${f.reason}: ${f.path}: ${f.errors.join('; ')}`;
    case 'invalid-safetensors':
      return `${f.reason}: ${f.error.reason} in ${f.error.file}${f.error.tensor === undefined ? '' : ` (tensor ${f.error.tensor})`}${f.error.expected === undefined ? '' : `, expected ${f.error.expected}`}${f.error.actual === undefined ? '' : `, actual ${f.error.actual}`}`;
    case 'interchange-tensor-missing':
    case 'unexpected-tensor':
      return `${f.reason}: ${f.tensor} in ${f.file}`;
    case 'interchange-tensor-mismatch':
      return `${f.reason}: ${f.tensor} in ${f.file}: ${f.field} expected ${f.expected}, actual ${f.actual}`;
    case 'missing-group-size':
      return `${f.reason}: ${f.tensor}`;
    case 'invalid-group-size':
      return `${f.reason}: ${f.tensor}: g=${f.groupSize} must be a multiple of 4 dividing the row length ${f.rowLength}`;
    case 'scale-shape-mismatch':
      return `${f.reason}: ${f.tensor}: expected ${f.expected}, actual ${f.actual}`;
    case 'invalid-ternary-value':
      return `${f.reason}: ${f.tensor}[${f.row}, ${f.col}] = ${f.value}, expected -1, 0 or 1`;
    case 'tied-head-present':
      return `${f.reason}: ${f.tiedTo} is tied to ${f.tensor} but the interchange stores it separately`;
    case 'invalid-source-checkpoint':
      return `source checkpoint ${f.dir} unreadable: ${describeSafetensorsError(f.error)}`;
    case 'invalid-source-config':
      return `source checkpoint unreadable: ${f.path}: ${f.detail}`;
    case 'requirements-unresolvable':
      return `the serving requirements do not resolve for ${f.target}${f.requirements.length > 0 ? `: no wheel for ${f.requirements.join(', ')}` : ''}${factLines({ resolver: f.detail })}`;
    case 'wheel-unavailable':
      return `wheel not found for ${f.target}: ${f.requirements.join(', ')}${factLines({ pip: f.detail })}`;
    case 'wheel-hash-mismatch':
      return `${f.filename}: sha256 ${f.actual} is not one the index lists${factLines({ expected: f.expected })}`;
    case 'tool-failed':
      return `could not run ${f.command}: ${f.detail}`;
    case 'cuda-unknown':
      return f.detail;
    case 'cuda-mismatch': {
      const got = f.cuda === null ? 'no CUDA runtime (a CPU stack)' : `CUDA ${f.cuda.runtime} (${f.cuda.runtime_package}), which needs a driver >= ${f.cuda.min_driver}`;
      return `the profile wants CUDA ${f.wanted}, but the resolved set (torch ${f.torch ?? 'absent'}) carries ${got}`;
    }
    case 'offline-install-unproven':
      return `an offline install from wheels/ does not resolve${f.missing.length > 0 ? `: missing ${f.missing.join(', ')}` : ''} (${Object.keys(f.checks).join(', ')} check failed)${factLines(f.checks)}`;
    case 'python-headers-unpinned':
      return `${f.lock} pins no headers for CPython ${f.python}: ${f.detail}`;
    case 'python-headers-invalid':
      return `the CPython headers package ${f.url}: ${f.detail}`;
    case 'submission-input-missing':
      return `missing ${f.path}: ${f.detail}`;
    case 'submission-input-invalid':
      return `invalid ${f.path}: ${f.detail}`;
    case 'evidence-record-missing':
      return `no evidence record for stage ${f.stage} at ${f.path}: run it first`;
    case 'evidence-record-invalid':
      return `the evidence record of ${f.stage} (${f.path}) is invalid: ${f.errors.join('; ')}`;
    case 'evidence-chain-broken':
      return `the records do not chain: ${f.stage} was built from ${f.upstream} outputs ${f.actual.slice(0, 12)}, but ${f.upstream}'s record says ${f.expected.slice(0, 12)} (rerun ${f.stage})`;
    case 'eval-question-invalid':
      return `${f.path}: question ${f.id} is invalid: ${f.detail}`;
    case 'eval-role-refused':
      return `${f.path}: set ${f.set} has role "${f.role}"; a sweep accepts only ${f.allowed.join(', ')}`;
    case 'sweep-invalid':
      return `sweep of ${f.parameter} is invalid: ${f.detail}`;
    case 'server-not-ready':
      return `${f.detail}; server log tail:\n${f.logTail}`;
    case 'provenance-violation':
      return `provenance proof failed (${f.manifest}): benchmark or held-out data could reach quantize or a choice of defaults\n${f.violations.map((v) => `  ${v.source} [${v.rule}]: ${v.detail}`).join('\n')}`;
    case 'evidence-unverifiable':
      return `${f.detail}\n${f.items.map((i) => `  ${i}`).join('\n')}`;
    case 'worker-refused':
      return `${f.message}${factLines(f.facts)}`;
    case 'worker-result-invalid':
      return `the ${f.command} worker's result fails ${f.schema}:\n${f.errors.map((e) => `  ${e}`).join('\n')}`;
    case 'worker-rank-failed':
      return `rank ${f.rank} of ${f.worldSize} of the ${f.command} worker failed first (exit code ${f.exitCode ?? 'unknown'}: ${f.cause}); torchrun stopped the other ranks\n  its last log lines:\n${f.rankLog.length > 0 ? f.rankLog.map((l) => `    ${l}`).join('\n') : '    (none)'}`;
    case 'audit-gates-failed':
      return `${f.lines.join('\n')}${factLines(f.figures)}`;
    case 'smoke-not-run':
      return `the smoke test could not run: ${f.detail}`;
    case 'smoke-gates-failed':
      return `${f.gates.map((g) => `gate ${g.gate} (${g.name}) failed: ${g.detail}`).join('; ')}${factLines({ ...f.figures, serve_log_tail: f.serveLogTail })}`;
    default:
      return unreachable(f);
  }
}

/** A stage failure as the engine's `stage-failed` (its text made here, once). */
export function asEngineFailure(stage: string, f: Failure | StageFailure): Failure {
  return isStageFailure(f) ? { reason: 'stage-failed', stage, failure: f, message: formatStageFailure(f) } : f;
}

/** `return stageFailed(ctx.stage, {...})` from a stage's run. */
export function stageFailed(stage: string, f: Failure | StageFailure): { ok: false; error: Failure } {
  return err(asEngineFailure(stage, f));
}
