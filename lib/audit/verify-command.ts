/**
 * `tsx pipeline.ts verify <dir> [--source <checkpoint-dir>] [--json]`: the audit on any submission directory.
 * The source's tensor list comes from `--source`, else from the directory's architecture.json
 * (`source_tensors`); with neither, the manifest and byte checks run and the coverage check is reported as
 * skipped. Exit code 0 when every gate passes, 1 when one fails, 2 on bad usage or an unreadable source.
 */
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { auditSubmission, describeFailures, manifestUnreadable } from './audit.ts';
import { formatStageFailure } from '../failures.ts';
import { loadArchitectureSource, loadSourceCheckpoint, type SourceDescription } from './source.ts';

export const verifyCommand = {
  name: 'verify',
  description: 'Audit a submission directory: manifest, shard hashes, codes, coverage of the source, gates 1-3',
  argument: '<dir>',
  json: true,
  async run(args: readonly string[]): Promise<number> {
    let dir: string | undefined;
    let sourceDir: string | undefined;
    let json = false;
    for (let i = 0; i < args.length; i++) {
      const a = args[i]!;
      if (a === '--source') sourceDir = args[++i];
      else if (a === '--json') json = true;
      else if (dir === undefined && !a.startsWith('--')) dir = a;
      else {
        process.stderr.write(`verify: unexpected argument ${a}\nusage: verify <dir> [--source <checkpoint-dir>] [--json]\n`);
        return 2;
      }
    }
    if (dir === undefined || (args.includes('--source') && sourceDir === undefined)) {
      process.stderr.write('usage: verify <dir> [--source <checkpoint-dir>] [--json]\n');
      return 2;
    }
    if (!statSync(dir, { throwIfNoEntry: false })?.isDirectory()) {
      process.stderr.write(`verify: ${dir} is not a directory (give the submission directory: the one holding quantization_manifest.json)\n`);
      return 2;
    }
    let source: SourceDescription | null = null;
    if (sourceDir !== undefined) {
      const s = await loadSourceCheckpoint(sourceDir);
      if (!s.ok) {
        process.stderr.write(`verify: ${formatStageFailure(s.error)}\n`);
        return 2;
      }
      source = s.value;
    } else {
      const s = await loadArchitectureSource(join(dir, 'architecture.json'));
      if (!s.ok) {
        process.stderr.write(`verify: ${formatStageFailure(s.error)}\n`);
        return 2;
      }
      source = s.value;
    }
    const report = await auditSubmission(dir, { source });
    const unreadable = manifestUnreadable(report);
    if (json) process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
    else if (unreadable !== null) process.stdout.write(`verify ${dir}\n${unreadable}\nFAIL\n`);
    else {
      const g = report.gates;
      const lines = [
        `verify ${dir}`,
        source ? `source: ${report.source} (${report.counts.source_text_tensors} text-model tensors)` : 'source: none given (no --source, no source_tensors in architecture.json): source-coverage check skipped',
        `shards: ${report.shards.length}, ${report.shards.reduce((a, s) => a + s.size, 0)} bytes, ${report.shards.reduce((a, s) => a + s.code_bytes_scanned, 0)} code bytes scanned`,
        `audited tensors: ${report.counts.tensors}, original ${report.counts.original}, stored ${report.counts.stored} (codes ${report.counts.codes}, scales ${report.counts.scales}, floats ${report.counts.floats})`,
        `gate ternary-fraction: ${g['ternary-fraction'].value.toFixed(4)} (> ${g['ternary-fraction'].threshold}) ${g['ternary-fraction'].pass ? 'pass' : 'FAIL'}`,
        `gate stored-parameters: ${g['stored-parameters'].ratio.toFixed(4)} (<= ${g['stored-parameters'].threshold}) ${g['stored-parameters'].pass ? 'pass' : 'FAIL'}`,
        `gate weight-audit: ${g['weight-audit'].violations} violations ${g['weight-audit'].pass ? 'pass' : 'FAIL'}`,
        ...describeFailures(report),
        report.pass ? 'PASS' : 'FAIL',
      ];
      process.stdout.write(`${lines.join('\n')}\n`);
    }
    return report.pass ? 0 : 1;
  },
};

if (import.meta.url === `file://${process.argv[1]}`) {
  process.exitCode = await verifyCommand.run(process.argv.slice(2));
}
