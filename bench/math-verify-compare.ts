/**
 * `npm run bench:math-verify`: the hand-written MATH checker (lib/eval/math-equiv.ts) against math-verify 0.9.0
 * (python/ternforge/mathcheck.py, as lm-eval's minerva_math500 calls it) on every answer-equivalence case the
 * checker's tests hold (test/fixtures/math-cases.ts), each case's reply being `\boxed{predicted}`. Prints, and
 * writes to bench/results/math-verify-compare.md, the cases where either differs from the verdict by hand.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { mathEquivalent } from '../lib/eval/math-equiv.ts';
import { MATH_CASES } from '../test/fixtures/math-cases.ts';

const root = join(import.meta.dirname, '..');
const python = process.env.TERNFORGE_PYTHON ?? join(root, '.ternforge', 'venv', 'bin', 'python');

interface Verdict {
  correct: boolean;
  extracted: string | null;
}

/** math-verify's verdicts on (reply, reference) pairs, from the worker. */
export function mathVerify(pairs: ReadonlyArray<{ reply: string; reference: string }>): { version: string; verdicts: Verdict[] } {
  const dir = mkdtempSync(join(tmpdir(), 'math-verify-'));
  const config = join(dir, 'config.json');
  writeFileSync(config, JSON.stringify({ pairs }));
  const out = execFileSync(python, ['-m', 'ternforge', 'math-verify', '--config', config], { env: { ...process.env, PYTHONPATH: join(root, 'python') }, encoding: 'utf8', maxBuffer: 64 * 2 ** 20 });
  const result = out.trim().split('\n').map((l) => JSON.parse(l) as { event: string; math_verify: string; verdicts: Verdict[] }).find((e) => e.event === 'result');
  if (result === undefined) throw new Error('math-verify worker reported no result');
  return { version: result.math_verify, verdicts: result.verdicts };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const pairs = MATH_CASES.map(([p, r]) => ({ reply: `\\boxed{${p}}`, reference: r }));
  const started = performance.now();
  const mv = mathVerify(pairs);
  const mvMs = performance.now() - started;
  const t0 = performance.now();
  const ours = MATH_CASES.map(([p, r]) => mathEquivalent(p, r));
  const oursMs = performance.now() - t0;
  const esc = (s: string): string => '`' + s.replace(/\|/g, '\\|') + '`';
  const rows = MATH_CASES.map(([p, r, hand], i) => ({ p, r, hand, ours: ours[i]!, mv: mv.verdicts[i]! })).filter((x) => x.ours !== x.hand || x.mv.correct !== x.hand);
  const wrong = (k: 'ours' | 'mv'): number => MATH_CASES.filter(([, , hand], i) => (k === 'ours' ? ours[i] : mv.verdicts[i]!.correct) !== hand).length;
  const lines = [
    `# math-equiv.ts vs math-verify ${mv.version}`,
    '',
    `${MATH_CASES.length} cases (test/fixtures/math-cases.ts), each reply \`\\boxed{predicted}\`, gold \`$\\boxed{reference}$\`. Wrong against the verdict by hand: math-equiv.ts ${wrong('ours')}, math-verify ${wrong('mv')}. Time: math-verify ${(mvMs / 1000).toFixed(1)} s (with the worker's start), math-equiv ${(oursMs / 1000).toFixed(2)} s.`,
    '',
    '| predicted | reference | by hand | math-equiv.ts | math-verify | math-verify read |',
    '|---|---|---|---|---|---|',
    ...rows.map((x) => `| ${esc(x.p)} | ${esc(x.r)} | ${x.hand} | ${x.ours} | ${x.mv.correct} | ${x.mv.extracted === null ? '-' : esc(x.mv.extracted)} |`),
  ];
  const text = lines.join('\n') + '\n';
  writeFileSync(join(root, 'bench', 'results', 'math-verify-compare.md'), text);
  process.stdout.write(text);
}
