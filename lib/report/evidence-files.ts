/**
 * The JSON files of a submission that the reviewer guide and the HTML report read, each read once through
 * the one schema set (engine/json-io.ts) against its schema and typed by the schema's generated type. A
 * file that is absent is null (its stage is a placeholder or not in the build: the guide says "not shown");
 * a file that is present but not JSON or off its schema fails the report, naming the file and the field.
 */
import { join } from 'node:path';
import { engineSchemaSet, readJsonFile } from '../../engine/json-io.ts';
import { err, ok, type Result } from '../../engine/result.ts';
import type { AnswerRetention } from '../../schemas/generated/answer-retention.ts';
import type { AuditReport } from '../../schemas/generated/audit-report.ts';
import type { EvalReport } from '../../schemas/generated/eval-report.ts';
import type { QuantizationManifest } from '../../schemas/generated/manifest.ts';
import type { QualityReport } from '../../schemas/generated/quality-report.ts';
import type { QuantizeReport } from '../../schemas/generated/quantize-report.ts';
import type { SmokeReport } from '../../schemas/generated/smoke-report.ts';
import type { SourceRecord } from '../../schemas/generated/source-record.ts';
import type { StartupReport } from '../../schemas/generated/startup-report.ts';
import type { SweepRecord } from '../../schemas/generated/sweep-record.ts';
import { EVAL_OUTPUTS } from '../eval/run.ts';
import type { ReportFailure } from '../failures.ts';
import { EVIDENCE_PATHS } from './layout.ts';

/** Each file: its path inside the submission and its schema (relative to schemas/). */
export const EVIDENCE_FILES = {
  manifest: { path: 'quantization_manifest.json', schema: 'manifest.schema.json' },
  source: { path: 'evidence/source.json', schema: 'source-record.schema.json' },
  audit: { path: 'evidence/audit.json', schema: 'audit-report.schema.json' },
  quantizeReport: { path: EVIDENCE_PATHS.quantizeReport, schema: 'quantize-report.schema.json' },
  quality: { path: EVIDENCE_PATHS.quality, schema: 'quality-report.schema.json' },
  smoke: { path: EVIDENCE_PATHS.smoke, schema: 'smoke-report.schema.json' },
  startup: { path: EVIDENCE_PATHS.startupReport, schema: 'startup-report.schema.json' },
  eval: { path: `${EVIDENCE_PATHS.eval}/${EVAL_OUTPUTS.report.file}`, schema: EVAL_OUTPUTS.report.schema },
  answers: { path: `${EVIDENCE_PATHS.eval}/${EVAL_OUTPUTS.answers.file}`, schema: EVAL_OUTPUTS.answers.schema },
  sweep: { path: `${EVIDENCE_PATHS.eval}/${EVAL_OUTPUTS.sweep.file}`, schema: EVAL_OUTPUTS.sweep.schema },
} as const;

/** The checked files; null where absent. */
export interface EvidenceFiles {
  manifest: QuantizationManifest | null;
  source: SourceRecord | null;
  audit: AuditReport | null;
  quantizeReport: QuantizeReport | null;
  quality: QualityReport | null;
  smoke: SmokeReport | null;
  startup: StartupReport | null;
  eval: EvalReport | null;
  answers: AnswerRetention | null;
  sweep: SweepRecord | null;
}

/** Read every file of EVIDENCE_FILES under `submission`; every invalid one is listed in one failure. */
export function readEvidenceFiles(submission: string): Result<EvidenceFiles, ReportFailure> {
  const schemas = engineSchemaSet();
  const problems: string[] = [];
  const read = <T>(key: keyof typeof EVIDENCE_FILES): T | null => {
    const { path, schema } = EVIDENCE_FILES[key];
    const r = readJsonFile<T>(join(submission, path), schemas, schema, submission);
    if (r.ok) return r.value;
    if (r.error.reason === 'invalid-json') problems.push(...r.error.errors.map((e) => `${path} (schemas/${schema}): ${e}`));
    return null;
  };
  const files: EvidenceFiles = {
    manifest: read<QuantizationManifest>('manifest'),
    source: read<SourceRecord>('source'),
    audit: read<AuditReport>('audit'),
    quantizeReport: read<QuantizeReport>('quantizeReport'),
    quality: read<QualityReport>('quality'),
    smoke: read<SmokeReport>('smoke'),
    startup: read<StartupReport>('startup'),
    eval: read<EvalReport>('eval'),
    answers: read<AnswerRetention>('answers'),
    sweep: read<SweepRecord>('sweep'),
  };
  if (problems.length > 0) return err({ reason: 'evidence-unverifiable', detail: 'evidence files the guide reads fail their schemas', items: problems });
  return ok(files);
}
