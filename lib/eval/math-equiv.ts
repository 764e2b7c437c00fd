/**
 * MATH-500 scoring: the last `\boxed{...}` of a reply, compared with the reference answer by a
 * mathematical equivalence check, not string equality.
 *
 * The check runs in three layers:
 * 1. `normaliseLatex` rewrites presentation-only LaTeX (`\left`, spacing, `\dfrac`, degrees, units in
 *    `\text{}`, dollars, thousands separators, trailing full stops) into one spelling.
 * 2. `parseAnswer` reads the structure: matrices, intervals and their unions, tuples, sets and lists
 *    (unordered), `\pm`, equations, inequalities, percentages, and otherwise one scalar expression.
 * 3. Scalars are parsed by a small recursive-descent parser (no `eval`) into an `Ast` and compared
 *    exactly where both sides lie in Q(sqrt) (rationals plus rational multiples of square roots of
 *    integers, e.g. `\sqrt{8}` = `2\sqrt{2}`, `0.5` = `\frac12`), and otherwise numerically with a
 *    relative tolerance of 1e-8 (pi, trig, logs), with free variables evaluated at fixed sample points
 *    (so `(x+1)^2` = `x^2+2x+1`).
 */
import { answerText } from './content.ts';

// ---------------------------------------------------------------------------------------------------
// Extraction

const BOX_COMMANDS = ['\\boxed', '\\fbox'] as const;

/**
 * The argument of the last `\boxed{...}` (or `\fbox{...}`, or the `\boxed 5` form) in a reply's
 * answer text; `null` when there is none or the last one never closes (a reply cut off mid-answer).
 */
export function extractBoxed(content: string | null | undefined): string | null {
  const text = answerText(content);
  let at = -1;
  let command = '';
  for (const c of BOX_COMMANDS) {
    let i = text.lastIndexOf(c);
    // `\boxedfoo` is another command: skip matches followed by a letter.
    while (i >= 0 && /[A-Za-z]/.test(text[i + c.length] ?? '')) i = i === 0 ? -1 : text.lastIndexOf(c, i - 1);
    if (i > at) {
      at = i;
      command = c;
    }
  }
  if (at < 0) return null;
  let i = at + command.length;
  while (text[i] === ' ') i++;
  if (text[i] === '{') {
    let depth = 0;
    for (let j = i; j < text.length; j++) {
      if (text[j] === '\\') {
        j++; // an escaped brace (`\{`) does not count
        continue;
      }
      if (text[j] === '{') depth++;
      else if (text[j] === '}' && --depth === 0) return text.slice(i + 1, j).trim();
    }
    return null;
  }
  if (i === at + command.length) return null; // `\boxed` glued to something that is not `{`
  const m = /^[^\s$]+/.exec(text.slice(i));
  return m === null ? null : m[0];
}

// ---------------------------------------------------------------------------------------------------
// Exact arithmetic: rationals and Q(sqrt) sums

interface Rat {
  readonly n: bigint;
  readonly d: bigint;
}

const babs = (a: bigint): bigint => (a < 0n ? -a : a);
function bgcd(a: bigint, b: bigint): bigint {
  a = babs(a);
  b = babs(b);
  while (b !== 0n) [a, b] = [b, a % b];
  return a;
}
function rat(n: bigint, d = 1n): Rat {
  if (d === 0n) throw new RangeError('zero denominator');
  if (d < 0n) {
    n = -n;
    d = -d;
  }
  const g = bgcd(n, d);
  return g > 1n ? { n: n / g, d: d / g } : { n, d };
}
const ZERO = rat(0n);
const ONE = rat(1n);
const radd = (a: Rat, b: Rat): Rat => rat(a.n * b.d + b.n * a.d, a.d * b.d);
const rmul = (a: Rat, b: Rat): Rat => rat(a.n * b.n, a.d * b.d);
const rneg = (a: Rat): Rat => ({ n: -a.n, d: a.d });
const rinv = (a: Rat): Rat => rat(a.d, a.n);
const req = (a: Rat, b: Rat): boolean => a.n === b.n && a.d === b.d;
function rnum(a: Rat): number {
  const v = Number(a.n) / Number(a.d);
  if (Number.isFinite(v)) return v;
  // Both parts beyond float range: scale down by the same power of ten first.
  const shift = Math.max(a.n.toString().length, a.d.toString().length) - 300;
  const p = 10n ** BigInt(Math.max(shift, 0));
  return Number(a.n / p) / Number(a.d / p);
}

/** Limits that keep exact arithmetic cheap; beyond them a value is compared numerically. */
const MAX_EXACT_DIGITS = 4000;
const MAX_FACTOR = 1_000_000_000_000n;

function guard(a: Rat): Rat {
  if (a.n.toString().length + a.d.toString().length > MAX_EXACT_DIGITS) throw new RangeError('too large');
  return a;
}

/** sum of coef * sqrt(radicand), radicand squarefree and >= 1; no zero coefficients. */
type Surd = ReadonlyMap<bigint, Rat>;

function surd(entries: Iterable<[bigint, Rat]>): Surd {
  const m = new Map<bigint, Rat>();
  for (const [r, c] of entries) {
    const sum = radd(m.get(r) ?? ZERO, c);
    if (sum.n === 0n) m.delete(r);
    else m.set(r, guard(sum));
  }
  return m;
}
const sRat = (a: Rat): Surd => surd([[1n, a]]);
const sAdd = (a: Surd, b: Surd): Surd => surd([...a, ...b]);
const sNeg = (a: Surd): Surd => surd([...a].map(([r, c]) => [r, rneg(c)] as [bigint, Rat]));
function sMul(a: Surd, b: Surd): Surd {
  const out: Array<[bigint, Rat]> = [];
  for (const [r1, c1] of a) {
    for (const [r2, c2] of b) {
      // r1, r2 squarefree: r1*r2 = g^2 * (r1/g)(r2/g), and the cofactor is squarefree.
      const g = bgcd(r1, r2);
      out.push([(r1 / g) * (r2 / g), rmul(rmul(c1, c2), rat(g))]);
    }
  }
  return surd(out);
}
const sIsRational = (a: Surd): boolean => a.size === 0 || (a.size === 1 && a.has(1n));
const sAsRat = (a: Surd): Rat => a.get(1n) ?? ZERO;
function sEq(a: Surd, b: Surd): boolean {
  if (a.size !== b.size) return false;
  for (const [r, c] of a) {
    const o = b.get(r);
    if (o === undefined || !req(o, c)) return false;
  }
  return true;
}
function sNum(a: Surd): number {
  let v = 0;
  for (const [r, c] of a) v += rnum(c) * Math.sqrt(Number(r));
  return v;
}
/** 1/a, exactly when a is c*sqrt(r) or p + q*sqrt(r) (conjugate); otherwise null. */
function sInv(a: Surd): Surd | null {
  if (a.size === 0) return null;
  const terms = [...a];
  if (terms.length === 1) {
    const [r, c] = terms[0]!;
    // 1/(c sqrt r) = sqrt(r) / (c r)
    return surd([[r, rinv(rmul(c, rat(r)))]]);
  }
  if (terms.length === 2 && a.has(1n)) {
    const p = a.get(1n)!;
    const [r, q] = terms.find(([k]) => k !== 1n)!;
    const norm = radd(rmul(p, p), rneg(rmul(rmul(q, q), rat(r))));
    if (norm.n === 0n) return null;
    const k = rinv(norm);
    return surd([
      [1n, rmul(p, k)],
      [r, rneg(rmul(q, k))],
    ]);
  }
  return null;
}
/** n = s^2 * f with f squarefree, or null when n is too large to factor cheaply. */
function squareFactor(n: bigint): { s: bigint; f: bigint } | null {
  if (n > MAX_FACTOR) return null;
  let s = 1n;
  let f = 1n;
  let m = n;
  for (let p = 2n; p * p <= m; p++) {
    while (m % (p * p) === 0n) {
      m /= p * p;
      s *= p;
    }
    if (m % p === 0n) {
      m /= p;
      f *= p;
    }
  }
  return { s, f: f * m };
}
/** sqrt of a rational >= 0, exactly: sqrt(p/q) = sqrt(p q) / q. */
function sqrtRat(a: Rat): Surd | null {
  if (a.n < 0n) return null;
  if (a.n === 0n) return surd([]);
  const sf = squareFactor(a.n * a.d);
  if (sf === null) return null;
  return surd([[sf.f, rat(sf.s, a.d)]]);
}
function bigRoot(n: bigint, k: number): bigint | null {
  if (n < 0n) return null;
  const guess = BigInt(Math.round(Math.pow(Number(n), 1 / k)));
  for (const c of [guess - 1n, guess, guess + 1n]) if (c >= 0n && c ** BigInt(k) === n) return c;
  return null;
}
function sPow(a: Surd, k: bigint): Surd | null {
  const limit = sIsRational(a) ? 4096n : 64n;
  if (babs(k) > limit) return null;
  let base: Surd | null = a;
  if (k < 0n) {
    base = sInv(a);
    k = -k;
  }
  if (base === null) return null;
  let out: Surd = sRat(ONE);
  for (let i = 0n; i < k; i++) out = sMul(out, base);
  return out;
}

// ---------------------------------------------------------------------------------------------------
// Normalisation

const UNIT_WORDS = [
  'units?', 'sq', 'square', 'cubic', 'cm', 'mm', 'km', 'm', 'meters?', 'metres?', 'centimeters?', 'millimeters?',
  'kilometers?', 'in', 'inch', 'inches', 'ft', 'foot', 'feet', 'yd', 'yards?', 'miles?', 'mi', 'mph', 'kg', 'g',
  'grams?', 'kilograms?', 'lbs?', 'pounds?', 'ounces?', 'oz', 'l', 'ml', 'liters?', 'litres?', 'gallons?', 'cups?',
  's', 'sec', 'seconds?', 'min', 'minutes?', 'h', 'hr', 'hrs', 'hours?', 'days?', 'weeks?', 'months?', 'years?',
  'degrees?', 'deg', 'radians?', 'rad', 'dollars?', 'cents?', 'people', 'persons?', 'students?', 'ways', 'points?',
  'times', 'percent', 'mathrm', 'cm\\^2', 'm\\^2',
];
const UNIT_RE = new RegExp(`^(?:(?:${UNIT_WORDS.join('|')})\\.?\\s*)+$`, 'i');
/** Multi-letter unit words that may follow a number outside `\text{}` (single letters may be variables). */
const BARE_UNIT_RE =
  /(\d|\})\s*(?:units?|square\s+units|sq\s+units|cm|mm|km|meters?|metres?|inches|inch|feet|ft|yards?|miles?|mph|kg|grams?|pounds?|lbs|liters?|seconds?|minutes?|hours?|days?|weeks?|years?|degrees?|dollars?|cents?)(?:\^\{?[23]\}?)?\s*$/i;
const TEXT_COMMANDS = /\\(?:text|textbf|textit|textrm|mathrm|mathbf|mathit|mbox|rm|boldsymbol|operatorname)\s*\{([^{}]*)\}(\^\{?[23]\}?)?/g;

/** Rewrite presentation-only LaTeX into one spelling (see the module comment). Pure string work. */
export function normaliseLatex(input: string): string {
  let s = input.trim();
  s = s.replace(/^\$+|\$+$/g, '').replace(/\\\$/g, '').replace(/\$/g, '');
  s = s.replace(/\\\(|\\\)/g, '');
  s = s.replace(/\\left\.|\\right\./g, '').replace(/\\left|\\right|\\big[lr]?|\\Big[lr]?|\\bigg[lr]?/g, '');
  s = s.replace(/(?<!\\)\\[!,:;> ]|\\q?quad|~/g, ' ');
  s = s.replace(/\\[dtc]frac/g, '\\frac').replace(/\\[dt]binom/g, '\\binom').replace(/\\displaystyle/g, '');
  s = s.replace(/\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|°|\\degree/g, '');
  s = s.replace(/\\%|\\text\{\s*%\s*\}/g, '%').replace(/\\text\{\s*percent\s*\}/g, '%');
  s = s.replace(/\{,\}/g, '');
  // `\text{ cm}^2` after a value is a unit; other `\text{...}` is unwrapped (its words may be the answer).
  for (let guardN = 0; guardN < 8 && TEXT_COMMANDS.test(s); guardN++) {
    TEXT_COMMANDS.lastIndex = 0;
    s = s.replace(TEXT_COMMANDS, (_m, inner: string, power: string | undefined, offset: number) => {
      const before = s.slice(0, offset).trim();
      if (before !== '' && UNIT_RE.test(inner.trim())) return ' ';
      return ` ${inner}${power ?? ''} `;
    });
  }
  TEXT_COMMANDS.lastIndex = 0;
  s = s.replace(BARE_UNIT_RE, '$1');
  s = s.replace(/\s+(?:or|and)\s+/g, ', ');
  s = s.replace(/\\[dt]?frac\s*(\d)\s*(\d)/g, '\\frac{$1}{$2}').replace(/\\frac\s*(\d)\s*\{/g, '\\frac{$1}{');
  s = s.replace(/\\frac\s*\{([^{}]*)\}\s*(\d)/g, '\\frac{$1}{$2}');
  s = s.replace(/\\sqrt\s*(\d)/g, '\\sqrt{$1}').replace(/\\sqrt\s+([A-Za-z])/g, '\\sqrt{$1}');
  s = s.replace(/\\\{/g, '⦃').replace(/\\\}/g, '⦄');
  s = s.replace(/\\lbrace/g, '⦃').replace(/\\rbrace/g, '⦄');
  s = s.trim().replace(/(?:\.|\\\\)+$/, '').trim();
  if (/^-?\d{1,3}(?:,\d{3})+(?:\.\d+)?$/.test(s)) s = s.replace(/,/g, '');
  return s.replace(/\s+/g, ' ').trim();
}

/** The last-resort text form: no whitespace, no braces, lower case, `(C)` as `c`. */
function canonicalText(s: string): string {
  let t = s.replace(/\s+/g, '').replace(/[{}]/g, '').toLowerCase();
  const letter = /^\(([a-z])\)$/.exec(t);
  if (letter !== null) t = letter[1]!;
  return t;
}

// ---------------------------------------------------------------------------------------------------
// Tokenizer and expression parser

type Tok =
  | { k: 'num'; v: Rat; text: string }
  | { k: 'var'; name: string }
  | { k: 'const'; name: 'pi' | 'inf' }
  | { k: 'fn'; name: string }
  | { k: 'cmd'; name: 'frac' | 'sqrt' | 'binom' }
  | { k: 'op'; v: string };

const FUNCTIONS = new Set(['sin', 'cos', 'tan', 'cot', 'sec', 'csc', 'arcsin', 'arccos', 'arctan', 'ln', 'log', 'exp']);
const OPS = new Set(['+', '-', '*', '/', '^', '(', ')', '[', ']', '{', '}', '!', '|', '_']);
const UNICODE_OPS: Record<string, string> = { '·': '*', '×': '*', '÷': '/', '−': '-', '–': '-' };

function parseDecimal(text: string): Rat {
  const m = /^(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?$/.exec(text)!;
  const intPart = m[1] ?? '';
  const frac = m[2] ?? '';
  let v = rat(BigInt((intPart + frac) || '0'), 10n ** BigInt(frac.length));
  const e = m[3] === undefined ? 0 : Number(m[3]);
  if (Math.abs(e) > 1000) throw new RangeError('exponent too large');
  if (e !== 0) v = rmul(v, e > 0 ? rat(10n ** BigInt(e)) : rat(1n, 10n ** BigInt(-e)));
  return v;
}

function tokenize(s: string): Tok[] | null {
  const out: Tok[] = [];
  let i = 0;
  while (i < s.length) {
    const ch = s[i]!;
    if (/\s/.test(ch)) {
      i++;
      continue;
    }
    const num = /^(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?/.exec(s.slice(i));
    if (num !== null) {
      out.push({ k: 'num', v: parseDecimal(num[0]), text: num[0] });
      i += num[0].length;
      continue;
    }
    if (ch === '\\') {
      const cmd = /^\\([A-Za-z]+)/.exec(s.slice(i));
      if (cmd === null) return null;
      const name = cmd[1]!;
      i += cmd[0].length;
      if (name === 'cdot' || name === 'times' || name === 'ast') out.push({ k: 'op', v: '*' });
      else if (name === 'div') out.push({ k: 'op', v: '/' });
      else if (name === 'pi') out.push({ k: 'const', name: 'pi' });
      else if (name === 'infty' || name === 'infin') out.push({ k: 'const', name: 'inf' });
      else if (name === 'frac' || name === 'sqrt' || name === 'binom') out.push({ k: 'cmd', name });
      else if (FUNCTIONS.has(name)) out.push({ k: 'fn', name });
      else if (name === 'lvert' || name === 'rvert' || name === 'vert') out.push({ k: 'op', v: '|' });
      else return null;
      continue;
    }
    if (/[A-Za-z]/.test(ch)) {
      out.push({ k: 'var', name: ch });
      i++;
      continue;
    }
    if (ch === 'π') out.push({ k: 'const', name: 'pi' });
    else if (ch === '∞') out.push({ k: 'const', name: 'inf' });
    else if (ch === '√') out.push({ k: 'cmd', name: 'sqrt' });
    else if (UNICODE_OPS[ch] !== undefined) out.push({ k: 'op', v: UNICODE_OPS[ch] });
    else if (OPS.has(ch)) out.push({ k: 'op', v: ch });
    else return null;
    i++;
  }
  return out;
}

/** A parsed scalar expression. */
export type Ast =
  | { t: 'num'; v: Rat; int: boolean }
  | { t: 'const'; name: 'pi' | 'inf' }
  | { t: 'var'; name: string }
  | { t: 'neg'; a: Ast }
  | { t: 'bin'; op: '+' | '-' | '*' | '/' | '^'; a: Ast; b: Ast }
  | { t: 'sqrt'; a: Ast; index: Ast | null }
  | { t: 'fn'; name: string; a: Ast; base: Ast | null }
  | { t: 'fact'; a: Ast }
  | { t: 'binom'; a: Ast; b: Ast }
  | { t: 'abs'; a: Ast };

class ParseError extends Error {}

class Parser {
  #i = 0;
  readonly #toks: Tok[];
  constructor(toks: Tok[]) {
    this.#toks = toks;
  }
  parseAll(): Ast {
    const e = this.#expr();
    if (this.#i !== this.#toks.length) throw new ParseError('trailing tokens');
    return e;
  }
  #peek(): Tok | undefined {
    return this.#toks[this.#i];
  }
  #isOp(v: string): boolean {
    const t = this.#peek();
    return t !== undefined && t.k === 'op' && t.v === v;
  }
  #expect(v: string): void {
    if (!this.#isOp(v)) throw new ParseError(`expected ${v}`);
    this.#i++;
  }
  #expr(): Ast {
    let left = this.#term();
    while (this.#isOp('+') || this.#isOp('-')) {
      const op = (this.#toks[this.#i++] as { v: '+' | '-' }).v;
      left = { t: 'bin', op, a: left, b: this.#term() };
    }
    return left;
  }
  #startsImplicit(): boolean {
    const t = this.#peek();
    if (t === undefined) return false;
    if (t.k === 'var' || t.k === 'const' || t.k === 'fn' || t.k === 'cmd') return true;
    return t.k === 'op' && (t.v === '(' || t.v === '{');
  }
  #term(): Ast {
    let left = this.#unary();
    for (;;) {
      if (this.#isOp('*') || this.#isOp('/')) {
        const op = (this.#toks[this.#i++] as { v: '*' | '/' }).v;
        left = { t: 'bin', op, a: left, b: this.#unary() };
      } else if (this.#startsImplicit()) {
        const right = this.#unary();
        left = mixedNumber(left, right) ?? { t: 'bin', op: '*', a: left, b: right };
      } else return left;
    }
  }
  #unary(): Ast {
    if (this.#isOp('-')) {
      this.#i++;
      return { t: 'neg', a: this.#unary() };
    }
    if (this.#isOp('+')) {
      this.#i++;
      return this.#unary();
    }
    return this.#power();
  }
  #power(): Ast {
    const base = this.#postfix();
    if (this.#isOp('^')) {
      this.#i++;
      return { t: 'bin', op: '^', a: base, b: this.#exponent() };
    }
    return base;
  }
  #exponent(): Ast {
    if (this.#isOp('-')) {
      this.#i++;
      return { t: 'neg', a: this.#exponent() };
    }
    const p = this.#postfix();
    if (this.#isOp('^')) {
      this.#i++;
      return { t: 'bin', op: '^', a: p, b: this.#exponent() };
    }
    return p;
  }
  #postfix(): Ast {
    let a = this.#primary();
    while (this.#isOp('!')) {
      this.#i++;
      a = { t: 'fact', a };
    }
    return a;
  }
  /** A LaTeX argument: `{expr}` or one primary token. */
  #arg(): Ast {
    if (this.#isOp('{')) {
      this.#i++;
      const e = this.#expr();
      this.#expect('}');
      return e;
    }
    return this.#postfix();
  }
  #primary(): Ast {
    const t = this.#toks[this.#i++];
    if (t === undefined) throw new ParseError('unexpected end');
    switch (t.k) {
      case 'num':
        return { t: 'num', v: t.v, int: /^\d+$/.test(t.text) };
      case 'var': {
        let name = t.name;
        if (this.#isOp('_')) {
          this.#i++;
          const sub = this.#toks[this.#i++];
          if (sub === undefined) throw new ParseError('bad subscript');
          if (sub.k === 'num') name += `_${sub.text}`;
          else if (sub.k === 'var') name += `_${sub.name}`;
          else if (sub.k === 'op' && sub.v === '{') {
            const inner: string[] = [];
            while (!this.#isOp('}')) {
              const x = this.#toks[this.#i++];
              if (x === undefined) throw new ParseError('bad subscript');
              inner.push(x.k === 'num' ? x.text : x.k === 'var' ? x.name : '?');
            }
            this.#i++;
            name += `_${inner.join('')}`;
          } else throw new ParseError('bad subscript');
        }
        return { t: 'var', name };
      }
      case 'const':
        return { t: 'const', name: t.name };
      case 'fn': {
        let base: Ast | null = null;
        if (this.#isOp('_')) {
          this.#i++;
          base = this.#arg();
        }
        let power: Ast | null = null;
        if (this.#isOp('^')) {
          this.#i++;
          power = this.#arg();
        }
        const a = this.#isOp('(') || this.#isOp('{') ? this.#primary() : this.#power();
        const f: Ast = { t: 'fn', name: t.name, a, base };
        return power === null ? f : { t: 'bin', op: '^', a: f, b: power };
      }
      case 'cmd': {
        if (t.name === 'sqrt') {
          let index: Ast | null = null;
          if (this.#isOp('[')) {
            this.#i++;
            index = this.#expr();
            this.#expect(']');
          }
          return { t: 'sqrt', a: this.#arg(), index };
        }
        const a = this.#arg();
        const b = this.#arg();
        return t.name === 'frac' ? { t: 'bin', op: '/', a, b } : { t: 'binom', a, b };
      }
      case 'op': {
        if (t.v === '(' || t.v === '{' || t.v === '[') {
          const e = this.#expr();
          this.#expect(t.v === '(' ? ')' : t.v === '{' ? '}' : ']');
          return e;
        }
        if (t.v === '|') {
          const e = this.#expr();
          this.#expect('|');
          return { t: 'abs', a: e };
        }
        throw new ParseError(`unexpected ${t.v}`);
      }
    }
  }
}

/** `2\frac{1}{2}` is the mixed number 5/2 (an integer directly followed by a fraction of integers). */
function mixedNumber(left: Ast, right: Ast): Ast | null {
  const isIntLit = (a: Ast): a is { t: 'num'; v: Rat; int: boolean } => a.t === 'num' && a.int;
  if (right.t !== 'bin' || right.op !== '/' || !isIntLit(right.a) || !isIntLit(right.b)) return null;
  if (isIntLit(left)) return { t: 'bin', op: '+', a: left, b: right };
  if (left.t === 'neg' && isIntLit(left.a)) return { t: 'neg', a: { t: 'bin', op: '+', a: left.a, b: right } };
  return null;
}

/** Parse one scalar expression; null when it is not one. */
export function parseExpression(s: string): Ast | null {
  let toks: Tok[] | null;
  try {
    toks = tokenize(s);
  } catch (e) {
    if (e instanceof RangeError) return null;
    throw e;
  }
  if (toks === null || toks.length === 0) return null;
  try {
    return new Parser(toks).parseAll();
  } catch (e) {
    if (e instanceof ParseError) return null;
    throw e;
  }
}

// ---------------------------------------------------------------------------------------------------
// Evaluation

function exactOf(a: Ast): Surd | null {
  try {
    return exactRec(a);
  } catch (e) {
    if (e instanceof RangeError) return null;
    throw e;
  }
}

function exactRec(a: Ast): Surd | null {
  switch (a.t) {
    case 'num':
      return sRat(a.v);
    case 'const':
    case 'var':
    case 'fn':
      return null;
    case 'neg': {
      const x = exactRec(a.a);
      return x === null ? null : sNeg(x);
    }
    case 'bin': {
      const x = exactRec(a.a);
      const y = exactRec(a.b);
      if (x === null || y === null) return null;
      switch (a.op) {
        case '+':
          return sAdd(x, y);
        case '-':
          return sAdd(x, sNeg(y));
        case '*':
          return sMul(x, y);
        case '/': {
          const inv = sInv(y);
          return inv === null ? null : sMul(x, inv);
        }
        case '^': {
          if (!sIsRational(y)) return null;
          const e = sAsRat(y);
          if (e.d === 1n) return sPow(x, e.n);
          if (e.d === 2n && sIsRational(x)) {
            const root = sqrtRat(sAsRat(x));
            return root === null ? null : sPow(root, e.n);
          }
          return null;
        }
      }
      return null;
    }
    case 'sqrt': {
      const x = exactRec(a.a);
      if (x === null || !sIsRational(x)) return null;
      if (a.index === null) return sqrtRat(sAsRat(x));
      const k = exactRec(a.index);
      if (k === null || !sIsRational(k)) return null;
      const kr = sAsRat(k);
      if (kr.d !== 1n || kr.n < 2n || kr.n > 64n) return null;
      if (kr.n === 2n) return sqrtRat(sAsRat(x));
      const v = sAsRat(x);
      const neg = v.n < 0n && kr.n % 2n === 1n;
      const rn = bigRoot(babs(v.n), Number(kr.n));
      const rd = bigRoot(v.d, Number(kr.n));
      if (rn === null || rd === null || (v.n < 0n && !neg)) return null;
      return sRat(rat(neg ? -rn : rn, rd));
    }
    case 'fact': {
      const x = exactRec(a.a);
      if (x === null || !sIsRational(x)) return null;
      const v = sAsRat(x);
      if (v.d !== 1n || v.n < 0n || v.n > 1000n) return null;
      let f = 1n;
      for (let i = 2n; i <= v.n; i++) f *= i;
      return sRat(rat(f));
    }
    case 'binom': {
      const n = exactRec(a.a);
      const k = exactRec(a.b);
      if (n === null || k === null || !sIsRational(n) || !sIsRational(k)) return null;
      const nv = sAsRat(n);
      const kv = sAsRat(k);
      if (nv.d !== 1n || kv.d !== 1n || kv.n < 0n || nv.n < 0n || nv.n > 10000n) return null;
      if (kv.n > nv.n) return sRat(ZERO);
      let c = 1n;
      for (let i = 0n; i < kv.n; i++) c = (c * (nv.n - i)) / (i + 1n);
      return sRat(rat(c));
    }
    case 'abs': {
      const x = exactRec(a.a);
      if (x === null) return null;
      return sNum(x) < 0 ? sNeg(x) : x;
    }
  }
}

function gamma(n: number): number {
  if (!Number.isInteger(n) || n < 0) return NaN;
  let f = 1;
  for (let i = 2; i <= n; i++) f *= i;
  return f;
}

function numOf(a: Ast, env: ReadonlyMap<string, number>): number {
  switch (a.t) {
    case 'num':
      return rnum(a.v);
    case 'const':
      return a.name === 'pi' ? Math.PI : Infinity;
    case 'var':
      return env.get(a.name) ?? NaN;
    case 'neg':
      return -numOf(a.a, env);
    case 'bin': {
      const x = numOf(a.a, env);
      const y = numOf(a.b, env);
      switch (a.op) {
        case '+':
          return x + y;
        case '-':
          return x - y;
        case '*':
          return x * y;
        case '/':
          return x / y;
        case '^':
          return Math.pow(x, y);
      }
      return NaN;
    }
    case 'sqrt': {
      const x = numOf(a.a, env);
      if (a.index === null) return Math.sqrt(x);
      const k = numOf(a.index, env);
      return x < 0 && Number.isInteger(k) && k % 2 === 1 ? -Math.pow(-x, 1 / k) : Math.pow(x, 1 / k);
    }
    case 'fn': {
      const x = numOf(a.a, env);
      const fns: Record<string, (v: number) => number> = {
        sin: Math.sin, cos: Math.cos, tan: Math.tan, cot: (v) => 1 / Math.tan(v), sec: (v) => 1 / Math.cos(v),
        csc: (v) => 1 / Math.sin(v), arcsin: Math.asin, arccos: Math.acos, arctan: Math.atan, ln: Math.log, exp: Math.exp,
        log: (v) => Math.log(v) / Math.log(a.base === null ? 10 : numOf(a.base, env)),
      };
      return fns[a.name]!(x);
    }
    case 'fact':
      return gamma(numOf(a.a, env));
    case 'binom': {
      const n = numOf(a.a, env);
      const k = numOf(a.b, env);
      return gamma(n) / (gamma(k) * gamma(n - k));
    }
    case 'abs':
      return Math.abs(numOf(a.a, env));
  }
}

function freeVars(a: Ast, out = new Set<string>()): Set<string> {
  if (a.t === 'var') out.add(a.name);
  for (const child of Object.values(a)) if (child !== null && typeof child === 'object' && 't' in child) freeVars(child as Ast, out);
  return out;
}

const REL_TOL = 1e-8;
function close(x: number, y: number): boolean {
  if (Number.isNaN(x) || Number.isNaN(y)) return false;
  if (!Number.isFinite(x) || !Number.isFinite(y)) return x === y;
  return Math.abs(x - y) <= REL_TOL * Math.max(1, Math.abs(x), Math.abs(y));
}

/** Deterministic sample points for free variables, away from 0, 1 and small integers. */
function sampleEnv(vars: ReadonlySet<string>, trial: number): Map<string, number> {
  const env = new Map<string, number>();
  for (const name of vars) {
    let h = 2166136261 ^ trial;
    for (const c of name) h = Math.imul(h ^ c.charCodeAt(0), 16777619);
    env.set(name, 0.5 + ((h >>> 0) % 10007) / 5003.5 + trial * 0.137);
  }
  return env;
}

/** Scalar equivalence: exact in Q(sqrt) when both sides are there, else numeric at sample points. */
export function scalarsEqual(a: Ast, b: Ast): boolean {
  const ea = exactOf(a);
  const eb = exactOf(b);
  if (ea !== null && eb !== null) return sEq(ea, eb);
  const vars = freeVars(b, freeVars(a));
  const trials = vars.size === 0 ? 1 : 4;
  for (let t = 0; t < trials; t++) {
    const env = sampleEnv(vars, t);
    if (!close(numOf(a, env), numOf(b, env))) return false;
  }
  return true;
}

// ---------------------------------------------------------------------------------------------------
// Structure

/** A parsed answer. `list` is unordered (sets, several answers, `\pm`); `bracketed` is ordered. */
export type MathAnswer =
  | { kind: 'scalar'; ast: Ast; percent: boolean }
  | { kind: 'text'; text: string }
  | { kind: 'bracketed'; open: '(' | '['; close: ')' | ']'; items: MathAnswer[] }
  | { kind: 'list'; items: MathAnswer[] }
  | { kind: 'union'; items: MathAnswer[] }
  | { kind: 'matrix'; rows: MathAnswer[][] }
  | { kind: 'equation'; lhs: Ast; rhs: Ast };

const OPENERS = new Set(['(', '[', '{', '⦃']);
const CLOSERS = new Set([')', ']', '}', '⦄']);

/** Split at top-level separators (outside any bracket; `(` and `[` close each other, as in intervals). */
function splitTop(s: string, seps: readonly string[]): string[] {
  const parts: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < s.length; i++) {
    const ch = s[i]!;
    if (ch === '\\' && /[A-Za-z]/.test(s[i + 1] ?? '')) {
      const cmd = /^\\[A-Za-z]+/.exec(s.slice(i))![0];
      if (depth === 0 && seps.includes(cmd)) {
        parts.push(s.slice(start, i));
        start = i + cmd.length;
      }
      i += cmd.length - 1;
      continue;
    }
    if (OPENERS.has(ch)) depth++;
    else if (CLOSERS.has(ch)) depth--;
    else if (depth === 0 && seps.includes(ch)) {
      parts.push(s.slice(start, i));
      start = i + 1;
    }
  }
  parts.push(s.slice(start));
  return parts.map((p) => p.trim());
}

/** Index of the bracket closing the one at 0, or -1. */
function matchingClose(s: string): number {
  let depth = 0;
  for (let i = 0; i < s.length; i++) {
    if (OPENERS.has(s[i]!)) depth++;
    else if (CLOSERS.has(s[i]!) && --depth === 0) return i;
  }
  return -1;
}

const SIMPLE_LHS = /^(?:[A-Za-z](?:_\{?\w+\}?)?|\(\s*[A-Za-z](?:\s*,\s*[A-Za-z])*\s*\)|[A-Za-z]\([A-Za-z]\))$/;
const REL = String.raw`(<|>|\\leq?|\\geq?|\\lt|\\gt|≤|≥)`;
const ONE_SIDED = new RegExp(String.raw`^([A-Za-z])\s*${REL}\s*(.+)$`);
const TWO_SIDED = new RegExp(String.raw`^(.+?)\s*${REL}\s*([A-Za-z])\s*${REL}\s*(.+)$`);
const isLess = (r: string): boolean => r === '<' || r === '\\lt';
const isLe = (r: string): boolean => r === '\\le' || r === '\\leq' || r === '≤';
const isGe = (r: string): boolean => r === '\\ge' || r === '\\geq' || r === '≥';

/** `x \le 3` as `(-\infty, 3]`, `1 < x \le 2` as `(1, 2]`; null for anything else. */
function inequalityAsInterval(s: string): string | null {
  const two = TWO_SIDED.exec(s);
  if (two !== null) {
    const [, lo, r1, , r2, hi] = two as unknown as [string, string, string, string, string, string];
    if ((isLess(r1) || isLe(r1)) && (isLess(r2) || isLe(r2))) return `${isLe(r1) ? '[' : '('}${lo}, ${hi}${isLe(r2) ? ']' : ')'}`;
    return null;
  }
  const one = ONE_SIDED.exec(s);
  if (one !== null) {
    const [, , r, v] = one as unknown as [string, string, string, string];
    if (isLess(r) || isLe(r)) return `(-\\infty, ${v}${isLe(r) ? ']' : ')'}`;
    return `${isGe(r) ? '[' : '('}${v}, \\infty)`;
  }
  return null;
}

function scalarOrText(s: string): MathAnswer {
  let body = s.trim();
  let percent = false;
  if (body.endsWith('%')) {
    percent = true;
    body = body.slice(0, -1).trim();
  }
  // Three letters in a row outside a command are a word (`even`, `Monday`), not a product of variables.
  if (/[A-Za-z]{3,}/.test(body.replace(/\\[A-Za-z]+/g, ' '))) return { kind: 'text', text: s };
  const ast = parseExpression(body);
  return ast === null ? { kind: 'text', text: s } : { kind: 'scalar', ast, percent };
}

/** Read the structure of a normalised answer (see the module comment). */
export function parseAnswer(raw: string, depth = 0): MathAnswer {
  let s = raw.trim();
  if (depth > 8) return { kind: 'text', text: s };
  const matrix = /^\\begin\{([pbBvV]?matrix|array)\}(?:\{[^}]*\})?([\s\S]*)\\end\{\1\}$/.exec(s);
  if (matrix !== null) {
    const rows = matrix[2]!.split(/\\\\/).map((r) => r.trim()).filter((r) => r !== '');
    return { kind: 'matrix', rows: rows.map((r) => r.split('&').map((c) => parseAnswer(c, depth + 1))) };
  }
  const eqParts = splitTop(s, ['=']);
  if (eqParts.length === 2 && SIMPLE_LHS.test(eqParts[0]!)) s = eqParts[1]!;
  const interval = inequalityAsInterval(s);
  if (interval !== null) s = interval;
  const union = splitTop(s, ['\\cup', '∪']);
  if (union.length > 1) return { kind: 'union', items: union.map((p) => parseAnswer(p, depth + 1)) };
  if (s.startsWith('⦃') && matchingClose(s) === s.length - 1) {
    const inner = s.slice(1, -1).trim();
    return { kind: 'list', items: inner === '' ? [] : splitTop(inner, [',', ';']).map((p) => parseAnswer(p, depth + 1)) };
  }
  if ((s.startsWith('(') || s.startsWith('[')) && matchingClose(s) === s.length - 1) {
    const items = splitTop(s.slice(1, -1), [',']);
    if (items.length > 1) {
      return {
        kind: 'bracketed',
        open: s[0] as '(' | '[',
        close: s[s.length - 1] as ')' | ']',
        items: items.map((p) => parseAnswer(p, depth + 1)),
      };
    }
  }
  const list = splitTop(s, [',', ';']);
  if (list.length > 1) return { kind: 'list', items: list.filter((p) => p !== '').map((p) => parseAnswer(p, depth + 1)) };
  const pm = splitTop(s, ['\\pm', '±']);
  if (pm.length === 2) {
    const plus = scalarOrText(`${pm[0]}+(${pm[1]})`);
    const minus = scalarOrText(`${pm[0]}-(${pm[1]})`);
    if (plus.kind === 'scalar' && minus.kind === 'scalar') return { kind: 'list', items: [plus, minus] };
  }
  const eq = splitTop(s, ['=']);
  if (eq.length === 2) {
    const lhs = parseExpression(eq[0]!);
    const rhs = parseExpression(eq[1]!);
    if (lhs !== null && rhs !== null) return { kind: 'equation', lhs, rhs };
  }
  return scalarOrText(s);
}

function scalarVariants(a: { ast: Ast; percent: boolean }, other: { percent: boolean }): Ast[] {
  if (a.percent === other.percent) return [a.ast];
  if (!a.percent) return [a.ast];
  // `50\%` against a plain reference: `50` and `0.5` both count.
  return [a.ast, { t: 'bin', op: '/', a: a.ast, b: { t: 'num', v: rat(100n), int: true } }];
}

function unorderedEqual(xs: readonly MathAnswer[], ys: readonly MathAnswer[]): boolean {
  if (xs.length !== ys.length) return false;
  const used = new Array<boolean>(ys.length).fill(false);
  for (const x of xs) {
    const j = ys.findIndex((y, k) => !used[k] && answersEqual(x, y));
    if (j < 0) return false;
    used[j] = true;
  }
  return true;
}

/** Structural equivalence of two parsed answers. */
export function answersEqual(a: MathAnswer, b: MathAnswer): boolean {
  switch (a.kind) {
    case 'scalar': {
      if (b.kind !== 'scalar') return false;
      for (const x of scalarVariants(a, b)) for (const y of scalarVariants(b, a)) if (scalarsEqual(x, y)) return true;
      return false;
    }
    case 'text':
      return b.kind === 'text' && canonicalText(a.text) === canonicalText(b.text);
    case 'bracketed':
      return (
        b.kind === 'bracketed' &&
        a.open === b.open &&
        a.close === b.close &&
        a.items.length === b.items.length &&
        a.items.every((x, i) => answersEqual(x, b.items[i]!))
      );
    case 'list':
    case 'union':
      return b.kind === a.kind && unorderedEqual(a.items, b.items);
    case 'matrix':
      return (
        b.kind === 'matrix' &&
        a.rows.length === b.rows.length &&
        a.rows.every((r, i) => r.length === b.rows[i]!.length && r.every((c, j) => answersEqual(c, b.rows[i]![j]!)))
      );
    case 'equation': {
      if (b.kind !== 'equation') return false;
      const da: Ast = { t: 'bin', op: '-', a: a.lhs, b: a.rhs };
      const db: Ast = { t: 'bin', op: '-', a: b.lhs, b: b.rhs };
      return scalarsEqual(da, db) || scalarsEqual(da, { t: 'neg', a: db });
    }
  }
}

/** Longer normalised answers are compared as text only (keeps every regex and the parser cheap). */
const MAX_ANSWER_CHARS = 2000;

/**
 * Whether a predicted answer (the inside of its `\boxed{}`) is mathematically equivalent to the
 * reference answer. `null` or empty predictions are never equivalent.
 */
export function mathEquivalent(predicted: string | null, reference: string): boolean {
  if (predicted === null) return false;
  const p = normaliseLatex(predicted);
  const r = normaliseLatex(reference);
  if (p === '') return false;
  if (canonicalText(p) === canonicalText(r)) return true;
  // A paragraph in a box is not an answer to parse; its text already failed to match.
  if (p.length > MAX_ANSWER_CHARS || r.length > MAX_ANSWER_CHARS) return false;
  return answersEqual(parseAnswer(p), parseAnswer(r));
}

/** Score one reply against a MATH-style reference: the last `\boxed{}` must be equivalent. */
export function scoreMath(content: string | null, reference: string): { extracted: string | null; correct: boolean } {
  const extracted = extractBoxed(content);
  return { extracted, correct: mathEquivalent(extracted, reference) };
}
