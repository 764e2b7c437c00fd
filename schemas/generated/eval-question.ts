/* Generated from schemas/eval-question.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * One file of evaluation or selection questions in one benchmark's format. Every file declares its role and its source, so that nothing with the role `evaluation` can reach quantize or a choice of defaults (the sweep refuses it).
 */
export type QuestionSet = {
  [k: string]: unknown;
} & {
  $schema?: string;
  /**
   * Stable name of the set, kebab-case; reports key on it.
   */
  name: string;
  /**
   * `evaluation`: only ever scored (benchmark items and their stand-ins). `selection`: may choose defaults such as the reasoning budget; written by the project or drawn from train splits, never benchmark items.
   */
  role: 'selection' | 'evaluation';
  /**
   * The benchmark whose format, prompt, scorer and normalisation this set follows (not a claim that its items come from it).
   */
  benchmark: 'gpqa-diamond' | 'mmlu-pro' | 'math-500' | 'livecodebench';
  source: Source;
  /**
   * @minItems 1
   */
  questions: [
    ChoiceQuestion | MathQuestion | CodeQuestion,
    ...(ChoiceQuestion | MathQuestion | CodeQuestion)[]
  ];
};

/**
 * Where the questions came from, so a reviewer can check the role.
 */
export interface Source {
  /**
   * `project-written`: authored for this repository; `train-split`: a public corpus's train split; `benchmark`: items of a graded benchmark (role must be `evaluation`).
   */
  kind: 'project-written' | 'train-split' | 'benchmark';
  description: string;
  /**
   * Hub dataset id, when drawn from one.
   */
  dataset?: string;
  /**
   * Dataset split, when drawn from one.
   */
  split?: string;
  /**
   * Pinned dataset revision, when drawn from one.
   */
  revision?: string;
  license?: string;
}
export interface ChoiceQuestion {
  id: string;
  kind: 'choice';
  /**
   * MMLU-Pro's subject category (its `category` column), which picks lm-eval's per-category mmlu_pro task (python/ternforge/harness.py MMLU_PRO_CATEGORIES); required of mmlu-pro sets the harness asks.
   */
  category?:
    | 'biology'
    | 'business'
    | 'chemistry'
    | 'computer science'
    | 'economics'
    | 'engineering'
    | 'health'
    | 'history'
    | 'law'
    | 'math'
    | 'other'
    | 'philosophy'
    | 'physics'
    | 'psychology';
  question: string;
  /**
   * Option texts in order; they are lettered A, B, C, ... in the prompt.
   *
   * @minItems 2
   * @maxItems 10
   */
  options:
    | [string, string]
    | [string, string, string]
    | [string, string, string, string]
    | [string, string, string, string, string]
    | [string, string, string, string, string, string]
    | [string, string, string, string, string, string, string]
    | [string, string, string, string, string, string, string, string]
    | [string, string, string, string, string, string, string, string, string]
    | [string, string, string, string, string, string, string, string, string, string];
  /**
   * The correct option's letter.
   */
  answer: string;
}
export interface MathQuestion {
  id: string;
  kind: 'math';
  problem: string;
  /**
   * Reference answer in LaTeX, as it would appear inside \boxed{}.
   */
  answer: string;
}
export interface CodeQuestion {
  id: string;
  kind: 'code';
  problem: string;
  /**
   * Starter code shown in the prompt (functional problems: `class Solution` with the method).
   */
  starterCode?: string;
  /**
   * The method (of `Solution`) or top-level function that functional tests call.
   */
  fnName?: string;
  /**
   * @minItems 1
   */
  tests: [StdinTest | FunctionalTest, ...(StdinTest | FunctionalTest)[]];
}
/**
 * LiveCodeBench `stdin` test: the program reads `input` on stdin and must print `output` (compared line by line, trailing whitespace ignored, numbers by value).
 */
export interface StdinTest {
  type: 'stdin';
  input: string;
  output: string;
}
/**
 * LiveCodeBench `functional` test: `fnName(*args)` must return `expected` (compared as JSON, tuples as lists).
 */
export interface FunctionalTest {
  type: 'functional';
  args: unknown[];
  expected: unknown;
}
