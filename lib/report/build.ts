/**
 * The report: the complete submission (emit's tree, hard-linked file by file) plus evidence/records/,
 * the upstream reports, the reviewer guide (README.md + guide.json) and the HTML report. Fails when the
 * records do not chain, when the provenance proof fails, when a cited anchor is missing, or when a rule's
 * check is contradicted by the evidence.
 */
import { copyFileSync, existsSync, mkdirSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { prettyJson } from '../../engine/digest.ts';
import type { Graph } from '../../engine/graph.ts';
import { engineSchemaSet, ENGINE_SCHEMAS, readJsonFile, SchemaSet } from '../../engine/json-io.ts';
import { err, ok, type Result } from '../../engine/result.ts';
import { linkOrCopy, listFiles as listTree } from '../../engine/files.ts';
import type { DataManifest } from '../../schemas/generated/data-manifest.ts';
import type { EvidenceRecord } from '../../schemas/generated/evidence-record.ts';
import { readEvidenceFiles } from './evidence-files.ts';
import { buildGuide } from './guide.ts';
import { renderGuide } from './guide-md.ts';
import { renderHtml } from './html.ts';
import { EVIDENCE_PATHS, EXTRA_EVIDENCE } from './layout.ts';
import { DATA_STAGE, proveProvenance } from './provenance.ts';
import type { RecordsFailure, ReportFailure } from '../failures.ts';
import { gatherRecords, recordPath, type StageEvidence } from './records.ts';

const STAGE = 'report';
/** fetch-calib's data manifest, relative to schemas/. */
const DATA_MANIFEST_SCHEMA = 'data-manifest.schema.json';

export interface ReportInputs {
  profile: string;
  workdir: string;
  /** Repository root (schemas/). */
  root: string;
  /** An empty directory: the complete submission is written here. */
  out: string;
  /** The report's direct upstream stages, with their committed outputs. */
  direct: readonly string[];
  upstream: (stage: string) => string;
  log: (line: string) => void;
}

export interface ReportSummary {
  files: number;
  linked: number;
  copied: number;
  records: string[];
  placeholders: string[];
  rules: Record<string, { passed: number; failed: number; not_shown: number }>;
  provenance: boolean;
  citations: number;
}


/** The graph as it ran: each record's key names its direct upstreams (pipeline.ts's declared edges). */
export function graphFromRecords(evidence: readonly StageEvidence[], self: string, selfNeeds: readonly string[]): Graph {
  const needs = new Map<string, readonly string[]>();
  for (const e of evidence) needs.set(e.stage, Object.keys(e.record.keyData.upstream).sort());
  needs.set(self, [...selfNeeds]);
  const order: string[] = [];
  const seen = new Set<string>();
  const visit = (n: string): void => {
    if (seen.has(n)) return;
    seen.add(n);
    for (const u of needs.get(n) ?? []) visit(u);
    order.push(n);
  };
  for (const e of evidence) visit(e.stage);
  visit(self);
  return { order, needs, defs: new Map() };
}

export async function buildReport(i: ReportInputs): Promise<Result<ReportSummary, ReportFailure | RecordsFailure>> {
  const fail = (detail: string, items: string[]): Result<never, ReportFailure> => err({ reason: 'evidence-unverifiable', detail, items });

  // 1. Records: the direct upstreams and, through their keys, everything above them.
  const closure: string[] = [];
  const queue = [...i.direct];
  while (queue.length > 0) {
    const s = queue.shift()!;
    if (closure.includes(s)) continue;
    closure.push(s);
    // Read through its schema here too: an upstream named by an invalid record is not followed blindly.
    const read = readJsonFile<EvidenceRecord>(recordPath(i.workdir, i.profile, s), engineSchemaSet(), ENGINE_SCHEMAS.evidenceRecord);
    if (!read.ok) return err({ reason: 'evidence-record-invalid', stage: s, path: read.error.reason === 'invalid-json' ? read.error.path : recordPath(i.workdir, i.profile, s), errors: read.error.reason === 'invalid-json' ? read.error.errors : [read.error.reason] });
    if (read.value !== null) queue.push(...Object.keys(read.value.keyData.upstream));
  }
  const outputsOf = (s: string): string => (i.direct.includes(s) ? i.upstream(s) : join(dirname(recordPath(i.workdir, i.profile, s)), 'outputs'));
  const gathered = gatherRecords({ workdir: i.workdir, profile: i.profile, stages: closure, outputsOf });
  if (!gathered.ok) return gathered;
  const graph = graphFromRecords(gathered.value, STAGE, i.direct);
  const evidence = graph.order.filter((s) => s !== STAGE).map((s) => gathered.value.find((e) => e.stage === s)!);
  const byStage = new Map(evidence.map((e) => [e.stage, e]));

  // 2. The submission: emit's tree, hard-linked file by file.
  if (!byStage.has('emit') || byStage.get('emit')!.placeholder) return fail('emit produced no submission to report on', ['emit is missing or a placeholder']);
  const emitOut = byStage.get('emit')!.outputs;
  let linked = 0;
  let copied = 0;
  const place = (from: string, to: string): void => {
    mkdirSync(dirname(join(i.out, to)), { recursive: true });
    if (linkOrCopy(from, join(i.out, to)) === 'linked') linked++;
    else copied++;
  };
  for (const f of listTree(emitOut)) place(join(emitOut, f), f);

  // 3. Evidence: records and upstream reports.
  for (const e of evidence) {
    const to = join(i.out, EVIDENCE_PATHS.records, `${e.stage}.json`);
    mkdirSync(dirname(to), { recursive: true });
    copyFileSync(recordPath(i.workdir, i.profile, e.stage), to);
  }
  for (const x of EXTRA_EVIDENCE) {
    const e = byStage.get(x.stage);
    if (e === undefined || e.placeholder || !existsSync(join(e.outputs, x.path))) continue;
    const src = join(e.outputs, x.path);
    if (statSync(src).isDirectory()) for (const f of listTree(src)) place(join(src, f), join(x.name, f));
    else if (!existsSync(join(i.out, x.name))) place(src, x.name);
  }

  // 4. The provenance proof.
  const calib = byStage.get(DATA_STAGE);
  let dataManifest: DataManifest | null = null;
  if (calib !== undefined && !calib.placeholder) {
    const path = join(calib.outputs, 'data_manifest.json');
    const read = readJsonFile<DataManifest>(path, engineSchemaSet(), DATA_MANIFEST_SCHEMA);
    if (!read.ok) return fail(`${DATA_STAGE}'s data manifest fails schemas/${DATA_MANIFEST_SCHEMA}`, read.error.reason === 'invalid-json' ? read.error.errors.map((e) => `${path}: ${e}`) : [path]);
    if (read.value === null) return fail(`${DATA_STAGE} ran but wrote no data_manifest.json`, [path]);
    dataManifest = read.value;
  }
  const proof = proveProvenance(graph, dataManifest);
  for (const s of proof.steps) i.log(`provenance ${s.id}: ${s.passed ? 'pass' : 'FAIL'}`);
  if (!proof.passed) return err({ reason: 'provenance-violation', manifest: calib === undefined ? '(none)' : join(calib.outputs, 'data_manifest.json'), violations: proof.violations });

  // 5. The guide and the report.
  const files = readEvidenceFiles(i.out);
  if (!files.ok) return files;
  const { guide, missing, failed } = buildGuide({ profile: i.profile, submission: i.out, evidence, proof, files: files.value });
  if (missing.length > 0) return fail('the guide cannot cite the shipped files: anchors not found', missing.map((m) => `${m.file}: "${m.anchor}": ${m.detail}`));
  if (failed.length > 0) return fail('the evidence contradicts a rule', failed);
  new SchemaSet(join(i.root, 'schemas')).check('evidence-guide.schema.json', guide, 'guide.json');
  writeFileSync(join(i.out, EVIDENCE_PATHS.guideJson), prettyJson(guide));
  writeFileSync(join(i.out, EVIDENCE_PATHS.guide), renderGuide(guide));
  writeFileSync(join(i.out, EVIDENCE_PATHS.html), renderHtml({ guide, evidence, graph, self: STAGE, files: files.value }));

  const rules = Object.fromEntries(guide.rules.map((r) => [r.id, { passed: r.checks.filter((c) => c.passed === true).length, failed: r.checks.filter((c) => c.passed === false).length, not_shown: r.checks.filter((c) => c.passed === null).length }]));
  for (const r of guide.rules) i.log(`rule ${r.id}: ${r.citations.length} citation(s), checks ${r.checks.map((c) => (c.passed === true ? 'pass' : c.passed === false ? 'FAIL' : 'n/a')).join(' ')}`);
  if (guide.placeholders.length > 0) i.log(`placeholders (no evidence): ${guide.placeholders.join(', ')}`);
  return ok({
    files: listTree(i.out).length,
    linked,
    copied,
    records: evidence.map((e) => e.stage),
    placeholders: guide.placeholders,
    rules,
    provenance: proof.passed,
    citations: guide.rules.reduce((a, r) => a + r.citations.length, 0),
  });
}
