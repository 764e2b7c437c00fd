import { describe, expect, it } from 'vitest';
import { extractChoice, scoreChoice } from '../lib/eval/choice.ts';

/** [content, option count, expected letter] */
const CASES: Array<[string, number, string | null]> = [
  ['Reasoning...\nAnswer: B', 4, 'B'],
  ['Answer: (B)', 4, 'B'],
  ['**Answer:** C', 4, 'C'],
  ['**Answer: D**', 4, 'D'],
  ['Answer: [a]', 4, 'A'],
  ['answer: b', 4, 'B'],
  ['ANSWER: C.', 4, 'C'],
  ['Answer: D) 42 kelvin', 4, 'D'],
  ['Final Answer: Option C', 4, 'C'],
  ['So the answer is B.', 4, 'B'],
  ['The correct answer is (C).', 4, 'C'],
  ['The correct option is D', 4, 'D'],
  ['Thus $\\boxed{B}$', 4, 'B'],
  ['\\boxed{\\text{C}}', 4, 'C'],
  ['\\boxed{(d)}', 4, 'D'],
  ['`Answer: A`', 4, 'A'],
  // last occurrence wins, across spellings
  ['Answer: A\nWait, I made an error. Answer: C', 4, 'C'],
  ['\\boxed{A} ... on reflection the answer is B', 4, 'B'],
  ['The answer is B. Answer: D', 4, 'D'],
  // ten options (MMLU-Pro)
  ['Answer: J', 10, 'J'],
  ['Answer: (G)', 10, 'G'],
  // beyond the option count: rejected, no fallback
  ['Answer: E', 4, null],
  ['Answer: B\nAnswer: F', 4, null],
  // not answers
  ['The answer is a bit subtle, so let me think.', 4, null],
  ['Answering this needs care: B is plausible', 4, null],
  ['Answer: Because the field is uniform', 4, null],
  ['No letter here at all.', 4, null],
  ['', 4, null],
  // reasoning never scored
  ['<think>Answer: A</think>', 4, null],
  ['long reasoning Answer: A</think>Answer: C', 4, 'C'],
];

describe('extractChoice', () => {
  it.each(CASES)('%j (%i options) -> %j', (content, n, expected) => {
    expect(extractChoice(content, n)).toBe(expected);
  });
  it('null content has no answer', () => {
    expect(extractChoice(null, 4)).toBeNull();
  });
});

describe('scoreChoice', () => {
  it('compares the extracted letter with the reference', () => {
    expect(scoreChoice('Answer: (c)', 4, 'C')).toEqual({ extracted: 'C', correct: true });
    expect(scoreChoice('Answer: B', 4, 'C')).toEqual({ extracted: 'B', correct: false });
    expect(scoreChoice('I cannot decide.', 4, 'C')).toEqual({ extracted: null, correct: false });
  });
});
