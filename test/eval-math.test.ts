import { describe, expect, it } from 'vitest';
import { extractBoxed, mathEquivalent, normaliseLatex, scoreMath } from '../lib/eval/math-equiv.ts';

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

/** [predicted, reference, equivalent] */
const TABLE: Array<[string, string, boolean]> = [
  // integers, signs, spacing
  ['5', '5', true],
  ['5.', '5', true],
  [' 5 ', '5', true],
  ['-3', '-3', true],
  ['3', '-3', false],
  ['1,000', '1000', true],
  ['1\\,000', '1000', true],
  ['1{,}000', '1000', true],
  // fractions, decimals, mixed numbers
  ['\\frac{1}{2}', '0.5', true],
  ['\\dfrac{1}{2}', '\\frac12', true],
  ['\\tfrac{3}{6}', '1/2', true],
  ['-\\frac{1}{2}', '\\frac{-1}{2}', true],
  ['\\frac{-1}{-2}', '\\frac{1}{2}', true],
  ['0.333', '\\frac{1}{3}', false],
  ['0.3333333333', '\\frac13', false],
  ['2\\frac{1}{2}', '\\frac{5}{2}', true],
  ['-2\\frac{1}{2}', '-2.5', true],
  ['2 \\frac{1}{2}', '1', false],
  ['\\frac{10}{4}', '2.5', true],
  ['\\frac{1}{2}', '\\frac{1}{3}', false],
  // radicals
  ['\\sqrt{8}', '2\\sqrt{2}', true],
  ['2\\sqrt2', '\\sqrt{8}', true],
  ['\\sqrt{12}', '3\\sqrt{2}', false],
  ['\\frac{\\sqrt{3}}{2}', '\\frac{1}{2}\\sqrt{3}', true],
  ['\\frac{1}{\\sqrt{2}}', '\\frac{\\sqrt{2}}{2}', true],
  ['\\sqrt{\\frac{3}{4}}', '\\frac{\\sqrt3}{2}', true],
  ['\\frac{\\sqrt{6}}{2\\sqrt{2}}', '\\frac{\\sqrt{3}}{2}', true],
  ['\\frac{1}{1+\\sqrt{2}}', '\\sqrt{2}-1', true],
  ['3+2\\sqrt{2}', '(1+\\sqrt2)^2', true],
  ['1.4142135', '\\sqrt{2}', false],
  ['\\sqrt[3]{27}', '3', true],
  ['2\\sqrt{3}+\\sqrt{2}', '\\sqrt{2}+\\sqrt{12}', true],
  // pi and numeric fallback
  ['2\\pi', '\\pi \\cdot 2', true],
  ['\\frac{\\pi}{2}', '\\frac{1}{2}\\pi', true],
  ['6.2832', '2\\pi', false],
  ['\\pi', '3.14', false],
  ['\\frac{\\pi}{3}', '\\frac{\\pi}{4}', false],
  ['\\sin(\\frac{\\pi}{6})', '\\frac{1}{2}', true],
  // scientific notation, percentages, degrees, units, dollars
  ['1.5 \\times 10^{3}', '1500', true],
  ['1.5e3', '1500', true],
  ['2.5\\times10^{-2}', '0.025', true],
  ['50\\%', '50', true],
  ['50\\%', '0.5', true],
  ['40\\%', '50', false],
  ['30^\\circ', '30', true],
  ['30^{\\circ}', '\\frac{\\pi}{6}', false],
  ['10\\text{ cm}', '10', true],
  ['12 \\text{ inches}', '12', true],
  ['\\$18.90', '18.9', true],
  ['18.90 dollars', '18.9', true],
  // equations and variables
  ['x = 5', '5', true],
  ['x=5', 'y=5', true],
  ['x = 6', '5', false],
  ['y = 2x + 3', 'y=3+2x', true],
  ['(x+1)^2', 'x^2+2x+1', true],
  ['x^2+2x+1', 'x^2+2x-1', false],
  ['2x + 3y = 6', '3y + 2x = 6', true],
  // intervals and unions
  ['[1, 2)', '[1,2)', true],
  ['[1, 2]', '[1, 2)', false],
  ['(-\\infty, 3]', '(-\\infty,3]', true],
  ['\\left(-\\infty, 3\\right]', '(-\\infty, 3]', true],
  ['(-\\infty, 3)', '(-\\infty, 3]', false],
  ['(-\\infty,1)\\cup(2,\\infty)', '(2, \\infty) \\cup (-\\infty, 1)', true],
  ['(-\\infty,1)\\cup(2,\\infty)', '(-\\infty, 1) \\cup [2, \\infty)', false],
  ['x \\le 3', '(-\\infty, 3]', true],
  ['1 < x \\le 2', '(1, 2]', true],
  // tuples, sets, lists
  ['(1, 2)', '(1,2)', true],
  ['(2, 1)', '(1,2)', false],
  ['\\left( \\frac{1}{2}, \\sqrt{8} \\right)', '(0.5, 2\\sqrt{2})', true],
  ['\\{1, 2, 3\\}', '\\{3, 2, 1\\}', true],
  ['3, 1, 2', '\\{1,2,3\\}', true],
  ['1, 2', '1, 2, 3', false],
  ['x = 1, x = -2', '-2, 1', true],
  ['1 \\pm \\sqrt{2}', '1+\\sqrt{2}, 1-\\sqrt{2}', true],
  ['2 \\text{ or } 3', '3, 2', true],
  // matrices
  ['\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}', '\\begin{bmatrix}1&2\\\\3&4\\end{bmatrix}', true],
  ['\\begin{pmatrix} 1 & \\frac12 \\\\ 3 & 4 \\end{pmatrix}', '\\begin{pmatrix}1&0.5\\\\3&4\\end{pmatrix}', true],
  ['\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}', '\\begin{pmatrix}1&2\\\\4&3\\end{pmatrix}', false],
  // text answers
  ['\\text{(C)}', '(C)', true],
  ['\\text{Monday}', 'monday', true],
  ['\\text{even}', '\\text{odd}', false],
  ['\\text{yes}', '\\text{no}', false],
  // factorials and binomials
  ['5!', '120', true],
  ['\\binom{5}{2}', '10', true],
  ['\\dbinom{6}{3}', '21', false],
  // garbage never equals
  ['', '0', false],
  ['\\frac{1}{0}', '1', false],
];

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
