/**
 * No module imports itself through others: the TypeScript of engine/, lib/ and stages/ (type-only imports
 * count: a vocabulary that describes a module must sit below it), and each Python package, imports inside
 * functions included (a lazy import still ties the two modules together). Every cycle is listed.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, test } from 'vitest';

const root = join(import.meta.dirname, '..');

function walk(dir: string, ext: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir)) {
    const p = join(dir, e);
    if (e === '__pycache__' || e === 'node_modules' || e === 'tests') continue;
    if (statSync(p).isDirectory()) out.push(...walk(p, ext));
    else if (p.endsWith(ext)) out.push(p);
  }
  return out;
}

/** Every elementary cycle's rotation that starts at its smallest name, as `a -> b -> a`. */
export function cycles(graph: Map<string, string[]>): string[] {
  const found = new Set<string>();
  const nodes = [...graph.keys()].sort();
  for (const start of nodes) {
    // Cycles through `start` whose other nodes sort after it: each cycle is found once.
    const path: string[] = [start];
    const visit = (n: string): void => {
      for (const m of graph.get(n) ?? []) {
        if (m === start) found.add([...path, start].map((x) => relative(root, x)).join(' -> '));
        else if (m > start && !path.includes(m) && path.length < 8) {
          path.push(m);
          visit(m);
          path.pop();
        }
      }
    };
    visit(start);
  }
  return [...found].sort();
}

function tsGraph(): Map<string, string[]> {
  const files = ['engine', 'lib', 'stages'].flatMap((d) => walk(join(root, d), '.ts'));
  const known = new Set(files);
  const graph = new Map<string, string[]>();
  for (const f of files) {
    const src = readFileSync(f, 'utf8');
    const deps = [...src.matchAll(/^\s*(?:import|export)\s[^;]*?\bfrom\s+'(\.[^']+)'/gms), ...src.matchAll(/\bimport\(\s*'(\.[^']+)'\s*\)/g)].map((m) => resolve(dirname(f), m[1]!));
    graph.set(f, [...new Set(deps.filter((d) => known.has(d)))]);
  }
  return graph;
}

function pyGraph(pkg: string): Map<string, string[]> {
  const dir = join(root, 'python', pkg);
  const files = walk(dir, '.py');
  const known = new Set(files);
  const moduleFile = (mod: string, from: string, level: number): string[] => {
    let base = dirname(from);
    for (let i = 1; i < level; i++) base = dirname(base);
    const p = join(base, ...mod.split('.').filter((x) => x !== ''));
    return [`${p}.py`, join(p, '__init__.py')].filter((x) => known.has(x));
  };
  const graph = new Map<string, string[]>();
  for (const f of files) {
    const deps: string[] = [];
    for (const m of readFileSync(f, 'utf8').matchAll(/^\s*from\s+(\.+)([\w.]*)\s+import\s+([\w, ()]+)/gm)) {
      const level = m[1]!.length;
      if (m[2] !== '') deps.push(...moduleFile(m[2]!, f, level));
      else for (const name of m[3]!.replace(/[()]/g, '').split(',').map((s) => s.trim().split(/\s+/)[0]!)) deps.push(...moduleFile(name, f, level));
    }
    for (const m of readFileSync(f, 'utf8').matchAll(new RegExp(`^\\s*from\\s+${pkg}\\.([\\w.]+)\\s+import`, 'gm'))) deps.push(...moduleFile(m[1]!, join(dir, '__init__.py'), 1));
    graph.set(f, [...new Set(deps.filter((d) => d !== f))]);
  }
  return graph;
}

describe('import cycles', () => {
  test('the finder sees a cycle, type-only and lazy imports included', () => {
    const a = join(root, 'a.ts');
    const b = join(root, 'b.ts');
    const c = join(root, 'c.ts');
    expect(cycles(new Map([[a, [b]], [b, [c]], [c, [a]]]))).toEqual(['a.ts -> b.ts -> c.ts -> a.ts']);
    expect(cycles(new Map([[a, [b]], [b, []], [c, [a]]]))).toEqual([]);
  });

  test('TypeScript: engine/, lib/, stages/', () => {
    expect(cycles(tsGraph())).toEqual([]);
  });

  for (const pkg of ['ternforge_server', 'ternforge']) {
    test(`Python: ${pkg}`, () => {
      const g = pyGraph(pkg);
      expect(g.size).toBeGreaterThan(3);
      expect(cycles(g)).toEqual([]);
    });
  }
});
