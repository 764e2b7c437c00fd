/**
 * Gathering the evidence records of every stage the report depends on (its upstream closure), each one
 * validated against schemas/evidence-record.schema.json, and checking that they chain: every upstream
 * digest in a record's key is the output digest of the record that produced it, from the pinned
 * checkpoint to the emitted shards.
 */
import { existsSync, readFileSync, realpathSync } from 'node:fs';
import { basename, join } from 'node:path';
import { engineSchemaSet, ENGINE_SCHEMAS } from '../../engine/json-io.ts';
import { upstreamClosure, type Graph } from '../../engine/graph.ts';
import { err, ok, type Result } from '../../engine/result.ts';
import type { RecordsFailure } from '../failures.ts';
import type { EvidenceRecord } from '../../schemas/generated/evidence-record.ts';

/** The file a placeholder stage leaves as its only output (stages/placeholder.ts). */
export const PLACEHOLDER_FILE = 'PLACEHOLDER';

/** One upstream stage as the report sees it. */
export interface StageEvidence {
  stage: string;
  /** The validated record of the run that produced the stage's current outputs. */
  record: EvidenceRecord;
  /** Absolute path of its committed outputs (`.ternforge/<profile>/<stage>/outputs`, resolved). */
  outputs: string;
  /** Its outputs are only a PLACEHOLDER file: the stage is not implemented yet, it produced no evidence. */
  placeholder: boolean;
}


/** Where a stage's record lives under a workdir (engine/store.ts's layout). */
export function recordPath(workdir: string, profile: string, stage: string): string {
  return join(workdir, '.ternforge', profile, stage, 'evidence.json');
}

/** Every stage upstream of `target` (transitively), in topological order, without `target` itself. */
export function upstreamStages(graph: Graph, target: string): string[] {
  return upstreamClosure(graph, [target]).filter((n) => n !== target);
}

/**
 * Read and validate the record of each stage in `stages`, then check the chain. `outputsOf(stage)`
 * gives the outputs directory (for in-place stages that have none, the record alone is used).
 */
export function gatherRecords(o: { workdir: string; profile: string; stages: readonly string[]; outputsOf: (stage: string) => string }): Result<StageEvidence[], RecordsFailure> {
  const schemas = engineSchemaSet();
  const out: StageEvidence[] = [];
  for (const stage of o.stages) {
    const path = recordPath(o.workdir, o.profile, stage);
    if (!existsSync(path)) return err({ reason: 'evidence-record-missing', stage, path });
    let value: unknown;
    try {
      value = JSON.parse(readFileSync(path, 'utf8'));
    } catch (e) {
      return err({ reason: 'evidence-record-invalid', stage, path, errors: [`not JSON: ${(e as Error).message}`] });
    }
    const errors = schemas.validate(ENGINE_SCHEMAS.evidenceRecord, value);
    if (errors.length > 0) return err({ reason: 'evidence-record-invalid', stage, path, errors });
    const record = value as EvidenceRecord;
    if (record.stage !== stage || record.profile !== o.profile) return err({ reason: 'evidence-record-invalid', stage, path, errors: [`record names stage ${record.stage} of profile ${record.profile}`] });
    const outputs = o.outputsOf(stage);
    // A content or uncached stage's outputs live in the store under their digest: the link must agree.
    if (record.outputMode !== 'in-place' && existsSync(outputs)) {
      const real = basename(realpathSync(outputs));
      if (real !== record.outputDigest) return err({ reason: 'evidence-chain-broken', stage, upstream: stage, expected: record.outputDigest, actual: real });
    }
    const placeholder = record.outputs.length === 1 && record.outputs[0]!.path === PLACEHOLDER_FILE;
    out.push({ stage, record, outputs, placeholder });
  }
  const byStage = new Map(out.map((e) => [e.stage, e]));
  for (const e of out) {
    for (const [up, digest] of Object.entries(e.record.keyData.upstream)) {
      const producer = byStage.get(up);
      if (producer === undefined) continue; // outside the gathered closure
      if (producer.record.outputDigest !== digest) return err({ reason: 'evidence-chain-broken', stage: e.stage, upstream: up, expected: producer.record.outputDigest, actual: digest });
    }
  }
  return ok(out);
}

