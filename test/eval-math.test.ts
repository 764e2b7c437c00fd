import { describe, expect, it } from 'vitest';
import { extractBoxed, mathEquivalent, normaliseLatex, scoreMath } from '../lib/eval/math-equiv.ts';
import { MATH_CASES as TABLE } from './fixtures/math-cases.ts';

describe('extractBoxed', () => {
  const cases: Array<[string, string | null]> = [
    ['so the answer is $\\boxed{5}$.', '5'],
    ['\\boxed{1} then corrected: \\boxed{2}', '2'],
    ['\\boxed{\\frac{1}{2}}', '\\frac{1}{2}'],
    ['\\boxed{\\{1, 2\\}}', '\\{1, 2\\}'],
    ['nested \\boxed{\\sqrt{\\frac{a}{b}}} end', '\\sqrt{\\frac{a}{b}}'],
    ['\\boxed 7 is it', '7'],
    ['$\\boxed 12$', '12'],
    ['\\fbox{3}', '3'],
    ['\\boxed{3} and \\fbox{4}', '4'],
    ['cut off \\boxed{\\frac{1}{2', null],
    ['no box at all: 5', null],
    ['<think>\\boxed{9}</think> final \\boxed{8}', '8'],
    ['reasoning \\boxed{9}</think> no box after', null],
    ['\\boxedx{3}', null],
  ];
  it.each(cases)('%j -> %j', (content, expected) => {
    expect(extractBoxed(content)).toBe(expected);
  });
});

describe('normaliseLatex', () => {
  it('removes presentation-only LaTeX', () => {
    expect(normaliseLatex('\\left( \\dfrac{1}{2}, 3 \\right)')).toBe('( \\frac{1}{2}, 3 )');
    expect(normaliseLatex('$30^\\circ$.')).toBe('30');
    expect(normaliseLatex('10\\text{ cm}^2')).toBe('10');
    expect(normaliseLatex('\\$1,000.50')).toBe('1000.50');
    expect(normaliseLatex('\\text{Monday}')).toBe('Monday');
  });
});

describe('mathEquivalent', () => {
  it('has at least 40 cases, both equal and not equal', () => {
    expect(TABLE.length).toBeGreaterThanOrEqual(40);
    expect(TABLE.filter((c) => c[2]).length).toBeGreaterThan(20);
    expect(TABLE.filter((c) => !c[2]).length).toBeGreaterThan(20);
  });
  it.each(TABLE)('%j vs %j -> %j', (predicted, reference, equal) => {
    expect(mathEquivalent(predicted, reference)).toBe(equal);
  });
  it('is symmetric on the table', () => {
    const asym = TABLE.filter(([p, r]) => mathEquivalent(p, r) !== mathEquivalent(r, p) && !/%/.test(p + r));
    expect(asym).toEqual([]);
  });
  it('stays fast on long or pathological answers', () => {
    // A backtracking parser or an evaluated 2^(10^10) takes minutes to forever on these; the checker takes
    // milliseconds. The bound only has to tell those apart, on a loaded two-core machine too.
    const PATHOLOGICAL_MS = 20_000;
    const started = performance.now();
    expect(mathEquivalent('x < '.repeat(3000) + '1', '1')).toBe(false);
    expect(mathEquivalent('('.repeat(500) + '1' + ')'.repeat(500), '1')).toBe(true);
    expect(mathEquivalent('2^{10^{10}}', '1')).toBe(false);
    expect(mathEquivalent('(\\sqrt{2}+\\sqrt{3}+\\sqrt{5})^{20}', '1')).toBe(false);
    expect(mathEquivalent('\\frac{'.repeat(200) + '1' + '}{2}'.repeat(200), '0')).toBe(false);
    expect(performance.now() - started).toBeLessThan(PATHOLOGICAL_MS);
  });
  it('a missing box is never correct', () => {
    expect(mathEquivalent(null, '5')).toBe(false);
  });
});

describe('scoreMath', () => {
  it('scores the last box of the content only', () => {
    expect(scoreMath('First \\boxed{3}, but wait, \\boxed{\\dfrac{6}{4}}.', '\\frac{3}{2}')).toEqual({ extracted: '\\dfrac{6}{4}', correct: true });
    expect(scoreMath('The answer is 3/2.', '\\frac{3}{2}')).toEqual({ extracted: null, correct: false });
  });
});
