/**
 * The provenance proof: from the declared stage graph (pipeline.ts) and fetch-calib's data manifest,
 * show that nothing with the role `evaluation`, no benchmark data and no validation or test split
 * reached quantize or any choice of defaults (DESIGN.md sections 2 and 3).
 *
 * The argument, step by step:
 *  1. classification: every declared source is classified by its dataset id, config, name and split,
 *     independently of fetch-calib's own policy (python/ternforge/calib/policy.py). Benchmark data and
 *     validation/test/dev splits may only have the role `evaluation`.
 *  2. reach: a stage can read only its direct upstreams' outputs (the engine refuses any other). So data
 *     held by a stage X can influence the submission only if the graph has a path X -> ... -> emit. The
 *     holders of evaluation data (eval's question sets, and any `evaluation` source in the data manifest)
 *     must have no such path. fetch-calib has one (fetch-calib -> quantize -> pack -> emit), so its data
 *     manifest must hold no `evaluation` source at all.
 *  3. defaults: every choice that ships (weights, manifest, server code and its defaults) is decided by
 *     emit's ancestors; none of them may hold evaluation data (step 2), and `selection` data is held to
 *     the same classification as calibration data (step 1).
 */
import { upstreamClosure, type Graph } from '../../engine/graph.ts';
import type { EvidenceGuide, ProofStep } from '../../schemas/generated/evidence-guide.ts';

/** The four roles of DESIGN.md section 3. */
export const ROLES = ['calibration', 'heldout', 'selection', 'evaluation'] as const;
export type Role = (typeof ROLES)[number];

/** Benchmark families and their known mirrors, matched against a source's dataset id, config and name. */
export const BENCHMARK_PATTERNS: ReadonlyArray<{ benchmark: string; pattern: RegExp }> = [
  { benchmark: 'GPQA', pattern: /gpqa/ },
  { benchmark: 'MATH-500', pattern: /math[-_ ]?500/ },
  { benchmark: 'MATH (hendrycks)', pattern: /hendrycks[-_ ]?math|competition[-_ ]?math|(^|\/)math$|(^|\/)math[-_ ]?(hard|lighteval)|lighteval\/math|math_dataset_hendrycks/ },
  { benchmark: 'PRM800K (MATH test problems)', pattern: /prm800k/ },
  { benchmark: 'LiveCodeBench', pattern: /livecodebench|code[-_]?generation[-_]?lite|lcb[-_]?(v\d|codegen)/ },
  { benchmark: 'MMLU-Pro', pattern: /mmlu[-_ ]?pro/ },
  { benchmark: 'MMLU', pattern: /(^|\/)mmlu($|[-_])|hendrycks[-_]?test|cais\/mmlu/ },
];
/** Splits that are never fitting data: validation, test, dev and their spellings. */
export const HELD_SPLIT = /^(validation|valid|val|test|testing|dev|eval|evaluation)([-_.[].*)?$/i;

/** The stage whose outputs are the submission. */
export const SUBMISSION_STAGE = 'emit';
/** The stage that holds the declared data sources (its outputs carry data_manifest.json). */
export const DATA_STAGE = 'fetch-calib';
/** The stage that gathers evidence into the submission (adds evidence/ only). */
export const REPORT_STAGE = 'report';
/** Stages that read evaluation data by design (benchmark-style question sets). */
export const EVALUATION_HOLDERS: readonly string[] = ['fetch-eval', 'eval'];

/** The proof as evidence/guide.json holds it (schemas/evidence-guide.schema.json, generated types). */
export type ProvenanceProof = EvidenceGuide['provenance'];
/** One declared source, as the data manifest lists it (fields the proof needs). */
export type DataSource = Omit<ProvenanceProof['sources'][number], 'benchmark' | 'heldSplit'>;
/** A source breaking a rule. */
export type ProvenanceViolation = ProvenanceProof['violations'][number];
export type { ProofStep };

/** Benchmark family a source matches, if any. */
export function benchmarkOf(s: Pick<DataSource, 'dataset' | 'config' | 'name'>): string | null {
  const names = [s.config ? `${s.dataset}/${s.config}` : s.dataset, s.name].map((n) => n.toLowerCase());
  for (const { benchmark, pattern } of BENCHMARK_PATTERNS) if (names.some((n) => pattern.test(n))) return benchmark;
  return null;
}

/** A path `from -> ... -> to` along the edges (downstream direction), or null. */
export function pathBetween(graph: Graph, from: string, to: string): string[] | null {
  const down = new Map<string, string[]>(graph.order.map((n) => [n, []]));
  for (const n of graph.order) for (const up of graph.needs.get(n) ?? []) down.get(up)!.push(n);
  const prev = new Map<string, string>();
  const queue = [from];
  const seen = new Set([from]);
  while (queue.length > 0) {
    const n = queue.shift()!;
    if (n === to) {
      const path = [n];
      while (path[0] !== from) path.unshift(prev.get(path[0]!)!);
      return path;
    }
    for (const d of down.get(n) ?? []) {
      if (!seen.has(d)) {
        seen.add(d);
        prev.set(d, n);
        queue.push(d);
      }
    }
  }
  return null;
}

/** `target` and every stage it transitively needs, in topological order. */
export function ancestry(graph: Graph, target: string): string[] {
  return upstreamClosure(graph, [target]);
}

/** Parse the data manifest's `sources` loosely: the fields the proof needs, each checked. */
export function parseSources(manifest: unknown): { sources: DataSource[]; problems: ProvenanceViolation[] } {
  const problems: ProvenanceViolation[] = [];
  const list = (manifest as { sources?: unknown } | null)?.sources;
  if (!Array.isArray(list)) return { sources: [], problems: [{ source: '(manifest)', rule: 'malformed-manifest', detail: 'data_manifest.json has no `sources` array' }] };
  const sources: DataSource[] = [];
  list.forEach((raw, i) => {
    const s = raw as Record<string, unknown>;
    const str = (k: string): string | null => (typeof s[k] === 'string' ? (s[k] as string) : null);
    const name = str('name') ?? `#${i}`;
    const dataset = str('dataset');
    const split = str('split');
    const role = str('role');
    if (dataset === null || split === null || role === null) {
      problems.push({ source: name, rule: 'malformed-manifest', detail: `source ${name} lacks ${['dataset', 'split', 'role'].filter((k) => str(k) === null).join(', ')}` });
      return;
    }
    sources.push({ name, dataset, config: str('config'), split, role, ...(str('file') !== null ? { file: str('file')! } : {}) });
  });
  return { sources, problems };
}

/**
 * Build the proof. `dataManifest` is the parsed data_manifest.json, or null when fetch-calib is a
 * placeholder (it produced no data). Never throws; `passed` says whether every step holds.
 */
export function proveProvenance(graph: Graph, dataManifest: unknown | null): ProvenanceProof {
  const violations: ProvenanceViolation[] = [];
  const parsed = dataManifest === null ? { sources: [], problems: [] } : parseSources(dataManifest);
  violations.push(...parsed.problems);
  const sources = parsed.sources.map((s) => ({ ...s, benchmark: benchmarkOf(s), heldSplit: HELD_SPLIT.test(s.split.trim()) }));

  // 1. classification
  const classFacts: string[] = [];
  if (dataManifest === null) classFacts.push(`${DATA_STAGE} is a placeholder: its outputs hold only a PLACEHOLDER file, so no data source was declared and no data reached any stage`);
  for (const s of sources) {
    const where = `${s.name} (${s.config ? `${s.dataset}/${s.config}` : s.dataset}, split ${s.split})`;
    if (!(ROLES as readonly string[]).includes(s.role)) violations.push({ source: s.name, rule: 'unknown-role', detail: `${where} has role "${s.role}", not one of ${ROLES.join(', ')}` });
    else if (s.benchmark !== null && s.role !== 'evaluation') violations.push({ source: s.name, rule: 'benchmark-not-evaluation', detail: `${where} is ${s.benchmark} benchmark data but has role "${s.role}"; benchmark data may only have the role "evaluation"` });
    else if (s.heldSplit && s.role !== 'evaluation') violations.push({ source: s.name, rule: 'held-split-not-evaluation', detail: `${where} is a validation/test split but has role "${s.role}"; such splits may only have the role "evaluation"` });
    classFacts.push(`${where}: role ${s.role}; benchmark ${s.benchmark ?? 'none'}; ${s.heldSplit ? 'held-out split' : 'train-type split'}`);
  }
  const classOk = !violations.some((v) => v.rule !== 'evaluation-reaches-submission');

  // 2. reach
  const submissionAncestry = ancestry(graph, SUBMISSION_STAGE);
  const dataReaders = graph.order.filter((n) => n !== REPORT_STAGE && (graph.needs.get(n) ?? []).includes(DATA_STAGE));
  const reachFacts: string[] = [];
  const holders = [...EVALUATION_HOLDERS.filter((h) => graph.needs.has(h))];
  const evalSources = sources.filter((s) => s.role === 'evaluation');
  if (evalSources.length > 0) holders.push(DATA_STAGE);
  reachFacts.push(`a stage reads only its direct upstreams' outputs; readers of ${DATA_STAGE}: ${dataReaders.join(', ') || 'none'}`);
  reachFacts.push(`stages that decide the submission (${SUBMISSION_STAGE} and its ancestors): ${submissionAncestry.join(', ')}`);
  if (graph.needs.has(REPORT_STAGE)) reachFacts.push(`${REPORT_STAGE} reads every stage's outputs but adds only files under evidence/, which serve.sh and the server never read`);
  let reachOk = true;
  for (const h of holders) {
    const path = pathBetween(graph, h, SUBMISSION_STAGE);
    if (path === null) reachFacts.push(`${h} holds evaluation data and has no path to ${SUBMISSION_STAGE}`);
    else {
      reachOk = false;
      const what = h === DATA_STAGE ? `evaluation source(s) ${evalSources.map((s) => s.name).join(', ')} in ${DATA_STAGE}'s data manifest` : `${h}'s evaluation data`;
      const detail = `${what} can reach the submission along ${path.join(' -> ')}`;
      reachFacts.push(detail);
      for (const s of h === DATA_STAGE ? evalSources : [{ name: h }]) violations.push({ source: s.name, rule: 'evaluation-reaches-submission', detail });
    }
  }
  if (evalSources.length === 0 && dataManifest !== null) reachFacts.push(`${DATA_STAGE}'s data manifest holds no source with the role evaluation`);

  // 3. defaults
  const byRole = (r: string): string => sources.filter((s) => s.role === r).map((s) => s.name).join(', ') || 'none';
  const defaultsFacts = [
    `calibration sources (fit the weights in quantize): ${byRole('calibration')}`,
    `heldout sources (perplexity in quality, which no shipped file depends on: ${pathBetween(graph, 'quality', SUBMISSION_STAGE) === null ? 'no path quality -> emit' : 'quality reaches emit'}): ${byRole('heldout')}`,
    `selection sources (choose defaults): ${byRole('selection')}`,
    `every default that ships is decided by ${submissionAncestry.join(', ')}; ${holders.filter((h) => submissionAncestry.includes(h)).length === 0 ? 'none of them holds evaluation data' : 'one of them holds evaluation data'}`,
  ];
  const defaultsOk = reachOk && classOk;

  const steps: ProofStep[] = [
    { id: 'classification', claim: 'Benchmark data and validation/test splits appear only with the role evaluation', passed: classOk, facts: classFacts },
    { id: 'reach', claim: 'No stage holding evaluation data has a path to the submission (emit)', passed: reachOk, facts: reachFacts },
    { id: 'defaults', claim: 'Quantize and every choice of defaults read only calibration, heldout or selection data of train-type splits', passed: defaultsOk, facts: defaultsFacts },
  ];
  return { passed: violations.length === 0, dataManifest: dataManifest === null ? 'placeholder' : 'present', sources, submissionAncestry, dataReaders, steps, violations };
}
