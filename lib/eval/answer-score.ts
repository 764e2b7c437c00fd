/**
 * Scoring one open answer (schemas/answer-set.schema.json) from a reply's `content`, never its reasoning.
 *
 * A reply is right when it states the answer and no other candidate: extra words around the answer are
 * fine ("The capital of France is Paris."), a reply that lists several candidates is not ("Paris or
 * Lyon"). Two kinds of answer:
 *
 * - `word`: text is compared after `normalise` (case, accents and punctuation dropped) as whole words.
 *   The reply must contain one of the question's accepted spellings, and, once those are taken out, none
 *   of the kind's other candidates (the other questions' accepted spellings and the kind's `candidates`),
 *   except words the question itself contains ("The opposite of hot is cold." names `hot` because the
 *   question did).
 * - `number`: every number the reply states, in digits or in words up to the hundreds, except the numbers
 *   the question states, is a candidate; there must be exactly one distinct value and it must equal the
 *   answer. So "7 minus 5 is 2." answers 2 (7 and 5 are the question's), "8 legs" answers 8, and "11 or
 *   12" answers nothing.
 */
import { answerText } from './content.ts';

/** Lower case, accents dropped, every run of characters other than letters and digits one space. */
export function normalise(text: string): string {
  return text
    .normalize('NFKD')
    .replace(/\p{M}/gu, '')
    .toLowerCase()
    .replace(/[^\p{L}\p{N}]+/gu, ' ')
    .trim();
}

function words(text: string): string[] {
  const n = normalise(text);
  return n === '' ? [] : n.split(' ');
}

/** Start indices where `phrase` occurs in `tokens` as whole words. */
function occurrences(tokens: readonly string[], phrase: readonly string[]): number[] {
  const out: number[] = [];
  if (phrase.length === 0) return out;
  for (let i = 0; i + phrase.length <= tokens.length; i++) {
    if (phrase.every((w, j) => tokens[i + j] === w)) out.push(i);
  }
  return out;
}

/** What the scorer found in one reply. */
export interface AnswerScore {
  readonly correct: boolean;
  /** The answer the reply gave (an accepted spelling or the one number); null when it gave none. */
  readonly extracted: string | null;
  /** Other candidates the reply named besides (or instead of) the answer; empty when none. */
  readonly others: string[];
}

/**
 * A `word` answer: `accept` are the question's spellings, `candidates` every spelling of the kind (the
 * question's own are ignored there).
 */
export function scoreWord(content: string | null | undefined, question: string, accept: readonly string[], candidates: readonly string[]): AnswerScore {
  const tokens = words(answerText(content));
  const covered = new Array<boolean>(tokens.length).fill(false);
  let extracted: string | null = null;
  // Longest spelling first, so "New Delhi" is taken before "Delhi".
  for (const spelling of [...accept].sort((a, b) => words(b).length - words(a).length)) {
    const phrase = words(spelling);
    for (const at of occurrences(tokens, phrase)) {
      extracted ??= spelling;
      for (let j = 0; j < phrase.length; j++) covered[at + j] = true;
    }
  }
  const asked = words(question);
  const own = new Set(accept.map(normalise));
  const others: string[] = [];
  for (const candidate of candidates) {
    const phrase = words(candidate);
    if (own.has(phrase.join(' ')) || occurrences(asked, phrase).length > 0 || others.includes(candidate)) continue;
    const free = occurrences(tokens, phrase).some((at) => phrase.every((_, j) => !covered[at + j]));
    if (free) others.push(candidate);
  }
  return { correct: extracted !== null && others.length === 0, extracted, others };
}

const UNITS: ReadonlyMap<string, number> = new Map(
  ['zero', 'one', 'two', 'three', 'four', 'five', 'six', 'seven', 'eight', 'nine', 'ten', 'eleven', 'twelve', 'thirteen', 'fourteen', 'fifteen', 'sixteen', 'seventeen', 'eighteen', 'nineteen'].map((w, i) => [w, i]),
);
const TENS: ReadonlyMap<string, number> = new Map(['twenty', 'thirty', 'forty', 'fifty', 'sixty', 'seventy', 'eighty', 'ninety'].map((w, i) => [w, 20 + 10 * i]));

/**
 * Every number a text states, in order: digits (`1,000` and `2.5` included; a sign is never read, so
 * "7-5" is 7 and 5) and English number words up to 999 ("twenty-one", "one hundred and five",
 * "a hundred").
 */
export function numbersIn(text: string): number[] {
  const tokens = answerText(text).toLowerCase().match(/\d+(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\p{L}+/gu) ?? [];
  const out: number[] = [];
  let i = 0;
  const at = (k: number): string => tokens[k] ?? '';
  while (i < tokens.length) {
    const t = at(i);
    if (/^\d/.test(t)) {
      out.push(Number(t.replace(/,/g, '')));
      i++;
      continue;
    }
    // [unit|a] hundred [and] ; then [tens [unit]] | [unit]
    let value: number | null = null;
    let j = i;
    const unit = (k: number): number | undefined => UNITS.get(at(k));
    if ((unit(j) !== undefined || at(j) === 'a') && at(j + 1) === 'hundred') {
      value = (unit(j) ?? 1) * 100;
      j += 2;
      if (at(j) === 'and' && (unit(j + 1) !== undefined || TENS.has(at(j + 1)))) j++;
    }
    const tens = TENS.get(at(j));
    if (tens !== undefined) {
      value = (value ?? 0) + tens;
      j++;
      const u = unit(j);
      if (u !== undefined && u > 0 && u < 10) {
        value += u;
        j++;
      }
    } else if (unit(j) !== undefined) {
      value = (value ?? 0) + unit(j)!;
      j++;
    }
    if (value === null) {
      i++;
      continue;
    }
    out.push(value);
    i = j;
  }
  return out;
}

/** A `number` answer: `answer` is the integer in digits. */
export function scoreNumber(content: string | null | undefined, question: string, answer: string): AnswerScore {
  const asked = new Set(numbersIn(question));
  const stated = [...new Set(numbersIn(answerText(content)))].filter((v) => !asked.has(v));
  const want = Number(answer);
  const extracted = stated.length === 1 ? String(stated[0]) : null;
  return { correct: stated.length === 1 && stated[0] === want, extracted, others: stated.length === 1 ? [] : stated.map(String) };
}
