/**
 * report: the complete submission. emit's tree hard-linked file by file (never a copy of the weights),
 * plus evidence/records/<stage>.json (every stage's evidence record), the upstream reports (data manifest,
 * quantize report, quality, smoke, eval), evidence/README.md + guide.json (the reviewer guide: each rule
 * of DESIGN.md section 2 mapped to files, lines and re-check commands, and the provenance proof) and
 * evidence/report.html (self-contained). `dist/<profile>` points here.
 *
 * Fails when a record is missing or does not chain, when the provenance proof finds benchmark or held-out
 * data that could reach quantize or a choice of defaults, when a cited anchor is gone from the shipped
 * files, or when the evidence contradicts a rule.
 */
import { ok } from '../engine/result.ts';
import { defineStage } from '../engine/types.ts';
import { stageFailed } from '../lib/failures.ts';
import { buildReport } from '../lib/report/build.ts';
import type { ReportParams } from '../schemas/generated/report.ts';

/** The report's direct upstreams, exactly its `needs` in pipeline.ts (ctx.upstream refuses any other). */
export const REPORT_NEEDS = ['fetch-model', 'fetch-calib', 'quantize', 'pack', 'quality', 'audit', 'vendor-wheels', 'emit', 'smoke-serve', 'eval'] as const;

export const stage = defineStage<ReportParams>({
  name: 'report',
  summary: 'Gather every evidence record into the submission; write the reviewer guide, the provenance proof and the HTML report',
  code: ['stages/report.ts', 'lib/report', 'lib/submission/wheels.ts', 'schemas/evidence-guide.schema.json', 'schemas/evidence-record.schema.json', 'pipeline.ts'],
  schema: 'schemas/stages/report.schema.json',
  tools: ['node'],
  // It copies this profile's records and names the profile in the guide and the HTML.
  namesProfile: true,
  async run(ctx) {
    const built = await buildReport({
      profile: ctx.profile,
      workdir: ctx.workdir,
      root: ctx.root,
      out: ctx.out,
      direct: REPORT_NEEDS,
      upstream: (s) => ctx.upstream(s),
      log: (l) => ctx.log(l),
    });
    if (!built.ok) return stageFailed(ctx.stage, built.error);
    const s = built.value;
    ctx.log(`submission: ${s.files} files (${s.linked} hard-linked, ${s.copied} copied); ${s.records.length} records; ${s.citations} citations; provenance ${s.provenance ? 'pass' : 'FAIL'}`);
    return ok({ summary: { ...s } });
  },
});
