/**
 * The start-up budget of the qwen3.5-4b submission on paper (the README's table), before any 4B build:
 * its sizes from the real Qwen3.5-4B text model's tensor list (the audit's check values) at the profile's
 * group size, the wheel bytes of the measured qwen3.5-4b set (and the ziglang wheel added since), and the rates of bench/startup-rates.json.
 *
 *   npx tsx bench/startup-budget.ts        # prints the Markdown table and the notes
 *
 * emit computes the same budget from the emitted submission's own manifest and wheels
 * (evidence/startup-budget.json).
 */
import { join } from 'node:path';
import { budgetMarkdown, readRates, startupBudget, type StartupFacts, type StartupRates } from '../lib/submission/startup-budget.ts';
import { qwen35_4bTensors } from '../test/fixtures/safetensors/generate.ts';

const root = join(import.meta.dirname, '..');
/**
 * ziglang 0.17.1's manylinux x86_64 wheel (PyPI), the serving lock's C compiler for Triton's launchers,
 * added after the measured install: its bytes join the install phase at the measured rate.
 */
export const ZIGLANG_WHEEL_BYTES = 101_083_562;

/**
 * qwen3.5-4b's sizes: every text linear but the (tied) embedding as 2-bit codes (4 per byte) with one f32
 * scale per `groupSize` weights; the embedding and the small tensors in their source dtype.
 */
export function qwen35_4bFacts(rates: StartupRates, groupSize = 32): StartupFacts {
  const numel = (s: readonly number[]): number => s.reduce((a, b) => a * b, 1);
  const text = qwen35_4bTensors().filter((t) => t.name.startsWith('model.language_model.'));
  const linear = text.filter((t) => t.shape.length === 2 && !t.name.endsWith('embed_tokens.weight'));
  const other = text.filter((t) => !linear.includes(t));
  const codes = linear.reduce((s, t) => s + numel(t.shape), 0);
  return {
    wheel_bytes: rates.measured.install.wheel_bytes + ZIGLANG_WHEEL_BYTES,
    shard_bytes: codes / 4 + (codes / groupSize) * 4 + other.reduce((s, t) => s + numel(t.shape) * (t.dtype === 'F32' ? 4 : 2), 0),
    dequantized_weights: codes,
    bf16_bytes: 2 * text.reduce((s, t) => s + numel(t.shape), 0),
    engine: 'vllm',
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const rates = readRates(root);
  const b = startupBudget(qwen35_4bFacts(rates), rates);
  process.stdout.write(budgetMarkdown(b) + '\n' + b.notes.map((n) => `- ${n}`).join('\n') + '\n');
}
