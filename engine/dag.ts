/** `dag`: the stage graph as an indented text tree (each stage under what it needs) or Mermaid. */
import type { Graph } from './graph.ts';

export function dagText(g: Graph): string {
  const lines: string[] = [];
  for (const name of g.order) {
    const needs = g.needs.get(name)!;
    lines.push(`${name}${needs.length === 0 ? '' : `  <- ${needs.join(', ')}`}`);
    lines.push(`    ${g.defs.get(name)!.summary}`);
  }
  return lines.join('\n') + '\n';
}

export function dagMermaid(g: Graph): string {
  const id = (n: string): string => n.replace(/[^A-Za-z0-9_]/g, '_');
  const lines = ['flowchart TD'];
  for (const name of g.order) lines.push(`  ${id(name)}["${name}"]`);
  for (const name of g.order) for (const up of g.needs.get(name)!) lines.push(`  ${id(up)} --> ${id(name)}`);
  return lines.join('\n') + '\n';
}
