/**
 * Multiple-choice scoring (GPQA Diamond, MMLU-Pro): the final option letter of a reply's `content`.
 *
 * The prompt asks for a last line `Answer: X`. Replies vary, so every common spelling counts, and the
 * last occurrence in the text wins: `Answer: (B)`, `**Answer:** C`, `Answer: [d]`, `the answer is B`,
 * `correct option is (C)`, `\boxed{B}`, `\boxed{\text{B}}`, with trailing punctuation or text. A bare
 * letter after `answer is` must be upper case (`the answer is a bit subtle` is not an answer); after
 * `Answer:` or inside brackets either case counts. A last letter beyond the question's options makes the
 * reply unanswered (no fallback to an earlier mention). Only the answer text is read, never reasoning.
 */
import { answerText } from './content.ts';

/** Letters in option order: A is the first option, J the tenth (MMLU-Pro's largest). */
export const OPTION_LETTERS = 'ABCDEFGHIJ';

interface Hit {
  readonly index: number;
  readonly letter: string;
}

const WRAPPED = String.raw`\(\s*([A-Ja-j])\s*\)|\[\s*([A-Ja-j])\s*\]|\{\s*([A-Ja-j])\s*\}`;
const TAIL = String.raw`(?![A-Za-z0-9])`;
/** Each pattern: its regex, and whether a bare (unbracketed) lower-case letter counts. */
const PATTERNS: ReadonlyArray<{ re: RegExp; lowerBare: boolean }> = [
  // `Answer: B`, `Final answer: (c)`, `ANSWER - D`, `Answer: Option B`
  { re: new RegExp(String.raw`\banswer\s*(?::|：|-|=)\s*(?:option\s+|choice\s+)?(?:${WRAPPED}|([A-Ja-j])${TAIL})`, 'gi'), lowerBare: true },
  // `the answer is B`, `correct option is (C)`, `answer is: D`
  { re: new RegExp(String.raw`\b(?:answer|option|choice)\s+(?:is|would\s+be|will\s+be)\s*:?\s*(?:option\s+|choice\s+)?(?:${WRAPPED}|([A-Ja-j])${TAIL})`, 'gi'), lowerBare: false },
  // `\boxed{B}`, `\boxed{(B)}`, `\boxed{\text{B}}`, `\boxed{\textbf{B}}`
  { re: /\\boxed\s*\{\s*(?:\\text(?:bf|rm)?\s*\{\s*)?\(?\s*([A-Ja-j])\s*\)?\s*\}?\s*\}/g, lowerBare: true },
];

/** Markdown emphasis, code ticks, LaTeX inline delimiters and dollars say nothing about the letter. */
function plain(text: string): string {
  return text.replace(/\*\*|__|[*`$]/g, '').replace(/\\\(|\\\)/g, ' ');
}

/**
 * The letter a reply chose, or null when there is none or the last one is beyond `optionCount`.
 * Upper case always.
 */
export function extractChoice(content: string | null | undefined, optionCount: number): string | null {
  const text = plain(answerText(content));
  let last: Hit | null = null;
  for (const { re, lowerBare } of PATTERNS) {
    re.lastIndex = 0;
    for (let m = re.exec(text); m !== null; m = re.exec(text)) {
      const groups = m.slice(1);
      const bare = re === PATTERNS[2]!.re ? undefined : groups[groups.length - 1];
      const letter = groups.find((g) => g !== undefined);
      if (letter === undefined) continue;
      if (bare !== undefined && letter === bare && !lowerBare && letter !== letter.toUpperCase()) continue;
      const index = m.index + m[0].length;
      if (last === null || index > last.index) last = { index, letter: letter.toUpperCase() };
    }
  }
  if (last === null) return null;
  return OPTION_LETTERS.indexOf(last.letter) < optionCount ? last.letter : null;
}

/** Score one reply: the extracted letter must equal the reference letter. */
export function scoreChoice(content: string | null, optionCount: number, answer: string): { extracted: string | null; correct: boolean } {
  const extracted = extractChoice(content, optionCount);
  return { extracted, correct: extracted !== null && extracted === answer.toUpperCase() };
}
