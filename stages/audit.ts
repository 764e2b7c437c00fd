import { writeFile, rename } from 'node:fs/promises';
import { join } from 'node:path';
import { engineSchemaSet } from '../engine/json-io.ts';
import { ok } from '../engine/result.ts';
import { stageFailed } from '../lib/failures.ts';
import { defineStage } from '../engine/types.ts';
import type { AuditParams } from '../schemas/generated/audit.ts';
import { auditSubmission, describeFailures } from '../lib/audit/audit.ts';
import { loadSourceCheckpoint } from '../lib/audit/source.ts';

/** Independent verifier of gates 1-3: pack's manifest and shards against fetch-model's own checkpoint. */
export const stage = defineStage<AuditParams>({
  name: 'audit',
  summary: 'Independently verify the submission gates from the stored bytes',
  code: ['stages/audit.ts', 'lib/audit', 'lib/safetensors', 'schemas/manifest.schema.json', 'schemas/audit-report.schema.json'],
  schema: 'schemas/stages/audit.schema.json',
  async run(ctx) {
    const source = await loadSourceCheckpoint(join(ctx.upstream('fetch-model'), 'model'));
    if (!source.ok) return stageFailed(ctx.stage, source.error);
    // Name the source by its place in the graph, not its absolute path: the record must not depend on the workdir.
    const report = await auditSubmission(ctx.upstream('pack'), { source: { ...source.value, origin: 'fetch-model/model' } });
    engineSchemaSet().check('audit-report.schema.json', report, 'audit.json');
    const path = join(ctx.out, 'audit.json');
    await writeFile(`${path}.tmp`, `${JSON.stringify(report, null, 2)}\n`);
    await rename(`${path}.tmp`, path);
    const g = report.gates;
    ctx.log(`ternary fraction ${g['ternary-fraction'].value.toFixed(4)}, stored/original ${g['stored-parameters'].ratio.toFixed(4)}, ${g['weight-audit'].violations} weight-audit violations`);
    const summary = { pass: report.pass, failed_gates: report.failed_gates, ternary_fraction: g['ternary-fraction'].value, stored_ratio: g['stored-parameters'].ratio, audited_tensors: report.counts.tensors, original: report.counts.original, stored: report.counts.stored };
    if (!report.pass) {
      const lines = describeFailures(report);
      for (const line of lines) ctx.log(line);
      return stageFailed(ctx.stage, { reason: 'audit-gates-failed', failedGates: report.failed_gates, lines, violations: report.violations.slice(0, 50), figures: summary });
    }
    return ok({ summary });
  },
});
