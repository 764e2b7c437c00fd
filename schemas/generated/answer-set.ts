/* Generated from schemas/answer-set.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * Open-answer questions of plain kinds (a capital, an opposite, a count) with their accepted spellings, asked through the served endpoint to measure how many of the full-precision model's right answers a ternary model keeps. Always the role `evaluation`: only ever scored, never fitted or selected on.
 */
export interface AnswerSet {
  $schema?: string;
  /**
   * Stable name of the set, kebab-case; reports key on it.
   */
  name: string;
  /**
   * Answer sets are only ever scored: nothing may fit weights or choose a default on them.
   */
  role: 'evaluation';
  /**
   * Where the questions came from, so a reviewer can check them.
   */
  source: {
    /**
     * Written for this repository; never benchmark items.
     */
    kind: 'project-written';
    description: string;
  };
  /**
   * Every kind of question in the set, by name; reports give one row per kind.
   */
  kinds: {
    [k: string]: Kind;
  };
  /**
   * @minItems 1
   */
  questions: [AnswerQuestion, ...AnswerQuestion[]];
}
export interface Kind {
  description: string;
  /**
   * `word`: the reply must name one accepted spelling and no other candidate of the kind; `number`: the reply must state exactly one number besides those in the question, equal to the answer.
   */
  answer: 'word' | 'number';
  /**
   * `word` kinds: more wrong answers of this kind than the other questions' accepted spellings (other planets, other colours); a reply naming one of them beside the right answer lists several candidates and scores zero.
   */
  candidates?: string[];
}
export interface AnswerQuestion {
  id: string;
  /**
   * One of the set's `kinds`.
   */
  kind: string;
  /**
   * Sent as the only user turn, as written.
   */
  question: string;
  /**
   * Accepted spellings (`word`), or the answer as a non-negative integer in digits (`number`, exactly one).
   *
   * @minItems 1
   */
  accept: [string, ...string[]];
}
