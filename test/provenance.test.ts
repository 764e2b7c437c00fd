/**
 * The provenance proof (lib/report/provenance.ts) over the real declared graph (pipeline.ts): it passes
 * on train-split calibration, held-out and selection data, and fails, naming the source and the rule,
 * when a benchmark dataset or a validation/test split is wired into calibration or selection, when
 * evaluation data sits where quantize can read it, or when the graph is rewired so that evaluation data
 * can reach the submission.
 */
import { describe, expect, test } from 'vitest';
import { buildGraph, type Graph } from '../engine/graph.ts';
import type { PipelineDecl } from '../engine/types.ts';
import { proveProvenance, type DataSource } from '../lib/report/provenance.ts';
import { pipeline } from '../pipeline.ts';

function graphOf(decl: PipelineDecl): Graph {
  const g = buildGraph(decl);
  if (!g.ok) throw new Error(JSON.stringify(g.error));
  return g.value;
}
const graph = graphOf(pipeline);

const clean: DataSource[] = [
  { name: 'openr1-math', dataset: 'open-r1/OpenR1-Math-220k', config: 'default', split: 'train', role: 'calibration', file: 'tokens/calibration/openr1-math.safetensors' },
  { name: 'fineweb-edu', dataset: 'HuggingFaceFW/fineweb-edu', config: 'sample-10BT', split: 'train', role: 'heldout' },
  { name: 'budget-questions', dataset: 'open-thoughts/OpenThoughts-114k', split: 'train', role: 'selection' },
];
const manifest = (sources: DataSource[]): unknown => ({ format: 'ternforge-data/1', sources });

describe('provenance proof', () => {
  test('passes on train-split calibration, held-out and selection data', () => {
    const p = proveProvenance(graph, manifest(clean));
    expect(p.violations).toEqual([]);
    expect(p.passed).toBe(true);
    expect(p.steps.map((s) => [s.id, s.passed])).toEqual([['classification', true], ['reach', true], ['defaults', true]]);
    expect(p.dataReaders).toEqual(['quantize', 'quality']);
    expect(p.submissionAncestry).toEqual(['python-env', 'fetch-model', 'fetch-calib', 'quantize', 'pack', 'audit', 'vendor-wheels', 'emit']);
  });

  test('a placeholder fetch-calib (no data at all) passes and says so', () => {
    const p = proveProvenance(graph, null);
    expect(p.passed).toBe(true);
    expect(p.dataManifest).toBe('placeholder');
    expect(p.steps[0]!.facts[0]).toContain('no data source was declared');
  });

  test('fails when a benchmark dataset is wired into calibration', () => {
    const p = proveProvenance(graph, manifest([...clean, { name: 'gpqa-cal', dataset: 'Idavidrein/gpqa', config: 'gpqa_diamond', split: 'train', role: 'calibration' }]));
    expect(p.passed).toBe(false);
    expect(p.violations).toEqual([{ source: 'gpqa-cal', rule: 'benchmark-not-evaluation', detail: 'gpqa-cal (Idavidrein/gpqa/gpqa_diamond, split train) is GPQA benchmark data but has role "calibration"; benchmark data may only have the role "evaluation"' }]);
    expect(p.steps.find((s) => s.id === 'classification')!.passed).toBe(false);
  });

  test('fails when a benchmark dataset is wired into selection', () => {
    const p = proveProvenance(graph, manifest([...clean, { name: 'math500', dataset: 'HuggingFaceH4/MATH-500', split: 'test', role: 'selection' }]));
    expect(p.violations.map((v) => [v.source, v.rule])).toEqual([['math500', 'benchmark-not-evaluation']]);
    for (const [dataset, bench] of [['TIGER-Lab/MMLU-Pro', 'MMLU-Pro'], ['livecodebench/code_generation_lite', 'LiveCodeBench'], ['cais/mmlu', 'MMLU'], ['EleutherAI/hendrycks_math', 'MATH (hendrycks)']] as const) {
      const q = proveProvenance(graph, manifest([{ name: 'x', dataset, split: 'train', role: 'selection' }]));
      expect(q.violations[0]?.detail).toContain(`is ${bench} benchmark data`);
    }
  });

  test('fails when a validation or test split is used for held-out perplexity or calibration', () => {
    const p = proveProvenance(graph, manifest([{ name: 'c4-val', dataset: 'allenai/c4', config: 'en', split: 'validation', role: 'heldout' }, { name: 'wiki-test', dataset: 'wikitext', split: 'test[:10%]', role: 'calibration' }]));
    expect(p.violations.map((v) => [v.source, v.rule])).toEqual([['c4-val', 'held-split-not-evaluation'], ['wiki-test', 'held-split-not-evaluation']]);
  });

  test('fails when evaluation data sits in the data manifest quantize reads, naming the path to the submission', () => {
    const p = proveProvenance(graph, manifest([...clean, { name: 'gpqa-eval', dataset: 'Idavidrein/gpqa', split: 'train', role: 'evaluation' }]));
    expect(p.passed).toBe(false);
    expect(p.violations).toEqual([{ source: 'gpqa-eval', rule: 'evaluation-reaches-submission', detail: "evaluation source(s) gpqa-eval in fetch-calib's data manifest can reach the submission along fetch-calib -> quantize -> pack -> emit" }]);
  });

  test('fails when the graph is rewired so that eval feeds quantize', () => {
    const rewired: PipelineDecl = { stages: pipeline.stages.map((s) => (s.stage.name === 'quantize' ? { ...s, needs: [...s.needs, 'eval'] } : s)) };
    // eval needs emit which needs quantize: that is a cycle, refused by the engine itself.
    expect(buildGraph(rewired).ok).toBe(false);
    const noCycle: PipelineDecl = { stages: pipeline.stages.map((s) => (s.stage.name === 'eval' ? { ...s, needs: ['python-env'] } : s.stage.name === 'quantize' ? { ...s, needs: [...s.needs, 'eval'] } : s)) };
    const p = proveProvenance(graphOf(noCycle), manifest(clean));
    expect(p.passed).toBe(false);
    expect(p.violations).toEqual([{ source: 'eval', rule: 'evaluation-reaches-submission', detail: "eval's evaluation data can reach the submission along eval -> quantize -> pack -> emit" }]);
  });

  test('an unknown role and a malformed source are violations', () => {
    const p = proveProvenance(graph, { sources: [{ name: 'a', dataset: 'x/y', split: 'train', role: 'tuning' }, { name: 'b', split: 'train' }] });
    expect(p.violations.map((v) => [v.source, v.rule])).toEqual([['b', 'malformed-manifest'], ['a', 'unknown-role']]);
    expect(proveProvenance(graph, { nope: 1 }).violations[0]!.rule).toBe('malformed-manifest');
  });
});
