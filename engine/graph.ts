/**
 * The stage graph from a PipelineDecl: validation (unknown needs, duplicates, cycles), topological
 * order, and upstream closures.
 */
import type { Failure } from './failure.ts';
import { err, ok, type Result } from './result.ts';
import type { PipelineDecl, StageDef } from './types.ts';

export interface Graph {
  /** Stages in a topological order (declaration order among independent stages). */
  readonly order: readonly string[];
  readonly defs: ReadonlyMap<string, StageDef<unknown>>;
  /** Direct upstream stages, as declared. */
  readonly needs: ReadonlyMap<string, readonly string[]>;
}

export function buildGraph(decl: PipelineDecl): Result<Graph, Failure> {
  const defs = new Map<string, StageDef<unknown>>();
  const needs = new Map<string, readonly string[]>();
  for (const { stage, needs: n } of decl.stages) {
    if (defs.has(stage.name)) return err({ reason: 'invalid-pipeline', detail: `stage "${stage.name}" is declared twice` });
    defs.set(stage.name, stage as StageDef<unknown>);
    needs.set(stage.name, [...n]);
  }
  const known = [...defs.keys()].sort();
  for (const [name, n] of needs) {
    for (const up of n) if (!defs.has(up)) return err({ reason: 'unknown-stage', stage: up, known });
    if (n.includes(name)) return err({ reason: 'cycle', path: [name, name] });
  }
  for (const [link, target] of Object.entries(decl.links ?? {})) {
    const stage = target.split('/')[0]!;
    if (!defs.has(stage)) return err({ reason: 'invalid-pipeline', detail: `link "${link}" points into unknown stage "${stage}" (known: ${known.join(', ')})` });
  }
  // Depth-first, in declaration order; a grey node met again closes a cycle.
  const order: string[] = [];
  const state = new Map<string, 'grey' | 'black'>();
  const stack: string[] = [];
  const visit = (name: string): string[] | null => {
    const s = state.get(name);
    if (s === 'black') return null;
    if (s === 'grey') return [...stack.slice(stack.indexOf(name)), name];
    state.set(name, 'grey');
    stack.push(name);
    for (const up of needs.get(name)!) {
      const cycle = visit(up);
      if (cycle !== null) return cycle;
    }
    stack.pop();
    state.set(name, 'black');
    order.push(name);
    return null;
  };
  for (const name of defs.keys()) {
    const cycle = visit(name);
    // Print the cycle in the direction of the edges (a needs b: b -> a).
    if (cycle !== null) return err({ reason: 'cycle', path: cycle.reverse() });
  }
  return ok({ order, defs, needs });
}

/** `targets` and everything upstream of them, in topological order. */
export function upstreamClosure(g: Graph, targets: readonly string[]): string[] {
  const want = new Set<string>();
  const add = (n: string): void => {
    if (want.has(n)) return;
    want.add(n);
    for (const up of g.needs.get(n) ?? []) add(up);
  };
  targets.forEach(add);
  return g.order.filter((n) => want.has(n));
}

/** Direct downstream stages of each stage. */
export function downstream(g: Graph): Map<string, string[]> {
  const out = new Map<string, string[]>(g.order.map((n) => [n, []]));
  for (const n of g.order) for (const up of g.needs.get(n)!) out.get(up)!.push(n);
  return out;
}
