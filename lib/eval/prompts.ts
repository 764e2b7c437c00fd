/**
 * Prompt templates, one per question format, each asking for the final form its scorer reads:
 * multiple choice a last line `Answer: X`, math a `\boxed{}` answer, code one fenced Python block.
 * The wording follows the public evaluation harnesses (simple-evals for multiple choice, Qwen's math
 * instruction, LiveCodeBench's code prompt) so that the local number tracks the grader's.
 */
import type { ChoiceQuestion, CodeQuestion, MathQuestion } from '../../schemas/generated/eval-question.ts';
import type { ChatMessage } from './client.ts';
import { OPTION_LETTERS } from './choice.ts';

export type Question = ChoiceQuestion | MathQuestion | CodeQuestion;

export function choicePrompt(q: ChoiceQuestion): string {
  const letters = OPTION_LETTERS.slice(0, q.options.length);
  const options = q.options.map((o, i) => `${letters[i]}) ${o}`).join('\n');
  return [
    `Answer the following multiple choice question. The last line of your response must be of the form "Answer: X" (without quotes), where X is one of ${letters.split('').join(', ')}. Think step by step before answering.`,
    '',
    q.question,
    '',
    options,
  ].join('\n');
}

export function mathPrompt(q: MathQuestion): string {
  return `${q.problem}\n\nPlease reason step by step, and put your final answer within \\boxed{}.`;
}

export function codePrompt(q: CodeQuestion): string {
  const intro =
    'You will be given a question (problem specification) and will generate a correct Python program that matches the specification and passes all tests.';
  const format =
    q.starterCode !== undefined
      ? `You will use the following starter code to write the solution to the problem. Reply with the complete solution as a single fenced Python code block:\n\`\`\`python\n${q.starterCode.trimEnd()}\n\`\`\``
      : 'Read the inputs from stdin, solve the problem and write the answer to stdout (do not directly test on the sample inputs). Reply with the complete program as a single fenced Python code block:\n```python\n# YOUR CODE HERE\n```';
  return `${intro}\n\nQuestion: ${q.problem}\n\n${format}`;
}

/** The chat messages sent for one question: one user turn, no system prompt (as the grader sends). */
export function promptFor(q: Question): ChatMessage[] {
  switch (q.kind) {
    case 'choice':
      return [{ role: 'user', content: choicePrompt(q) }];
    case 'math':
      return [{ role: 'user', content: mathPrompt(q) }];
    case 'code':
      return [{ role: 'user', content: codePrompt(q) }];
  }
}
