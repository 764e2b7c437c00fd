/**
 * The start-up budget: qwen3.5-4b's, from the measured rates (bench/startup-rates.json) and the real 4B
 * sizes, stays within 300 s with at least 25% to spare and is the README's table; emit writes the budget of
 * the submission it assembles (the shared tiny build) into evidence/, computed from that submission's own
 * manifest and wheels.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';
import { qwen35_4bFacts, ZIGLANG_WHEEL_BYTES } from '../bench/startup-budget.ts';
import { SchemaSet } from '../engine/json-io.ts';
import { contract } from '../lib/contract.ts';
import { BUILTIN_FALLBACK, budgetMarkdown, COMPILED_ONLY, startupLimitS, readRates, REQUIRED_SPARE, startupBudget, submissionFacts, VLLM_ESTIMATES } from '../lib/submission/startup-budget.ts';
import type { QuantizationManifest } from '../schemas/generated/manifest.ts';
import type { StartupBudget } from '../schemas/generated/startup-budget.ts';
import type { WheelsRecord } from '../schemas/generated/wheels-record.ts';

const root = join(import.meta.dirname, '..');
const schemas = new SchemaSet(join(root, 'schemas'));
const rates = readRates(root);

describe('the qwen3.5-4b start-up budget', () => {
  const facts = qwen35_4bFacts(rates);
  const budget = startupBudget(facts, rates);

  test('its sizes are the real 4B text model at group size 32 and the measured wheel set', () => {
    expect(facts.dequantized_weights).toBe(3_569_090_560); // DESIGN.md's linear count (test/audit.test.ts)
    expect(facts.bf16_bytes).toBe(2 * (3_569_090_560 + 248_320 * 2560 + 961_536));
    expect(facts.shard_bytes).toBe(3_569_090_560 / 4 + (3_569_090_560 / 32) * 4 + 2 * 248_320 * 2560 + 961_536 * 2 + 24 * 32 * 2);
    expect(facts.wheel_bytes).toBeGreaterThan(5e9); // vLLM + torch cu128 + CUDA 12 libraries
    expect(facts.engine).toBe('vllm');
  });

  test('passes its schema; every phase is there, measured where this machine can measure it', () => {
    expect(schemas.validate('startup-budget.schema.json', budget)).toEqual([]);
    expect(budget.phases.map((p) => p.basis)).toEqual(['measured', 'measured', 'estimated', 'estimated', 'estimated', 'measured', 'estimated', 'estimated', 'estimated', 'reserve']);
    expect(budget.phases.length).toBe(3 + VLLM_ESTIMATES.length + 1);
    for (const p of budget.phases) {
      expect(p.seconds).toBeGreaterThan(0);
      expect(p.arithmetic.length).toBeGreaterThan(20);
    }
    for (const key of VLLM_ESTIMATES) expect(rates.estimated[key]!.source.length).toBeGreaterThan(5);
    expect(budget.total_s).toBeCloseTo(budget.phases.reduce((s, p) => s + p.seconds, 0), 5);
  });

  test("the built-in engine's reserve is counted, as the server keeps it back, and is twice its estimate", () => {
    const reserve = budget.phases.at(-1)!;
    expect(reserve.phase).toMatch(/^reserve: the built-in engine/);
    expect(reserve.seconds).toBe(contract().startup.builtin_reserve_s);
    expect(reserve.seconds).toBeGreaterThanOrEqual(2 * rates.estimated[BUILTIN_FALLBACK]!.seconds!);
  });

  test('the compiled phases are out of the total (--enforce-eager) and the notes say what they would cost', () => {
    const phases = budget.phases.map((p) => p.phase).join('\n');
    expect(phases).not.toMatch(/torch\.compile|graph capture/);
    const compiled = COMPILED_ONLY.reduce((a, k) => a + rates.estimated[k]!.seconds!, 0);
    expect(compiled).toBeGreaterThan(60);
    const note = budget.notes.find((n) => n.startsWith('vLLM runs with --enforce-eager'));
    expect(note).toContain(`${Math.round((budget.total_s + compiled) * 10) / 10} s`);
    // Compiled, the budget would not keep its spare: the reason the server runs eager.
    expect(budget.total_s + compiled).toBeGreaterThan(startupLimitS() * (1 - REQUIRED_SPARE));
  });

  test(`the total is within ${startupLimitS()} s with at least ${REQUIRED_SPARE * 100}% to spare`, () => {
    expect(budget.total_s).toBeLessThanOrEqual(startupLimitS() * (1 - REQUIRED_SPARE));
    expect(budget.spare_fraction).toBeGreaterThanOrEqual(REQUIRED_SPARE);
    expect(budget.within).toBe(true);
  });

  test('the install phase is the measured install of the real set and the ziglang wheel added since, at the measured rate', () => {
    const install = budget.phases[0]!;
    expect(install.phase).toMatch(/^install/);
    const rate = rates.measured.install.wheel_bytes / rates.measured.install.cpu_s;
    expect(facts.wheel_bytes).toBe(rates.measured.install.wheel_bytes + ZIGLANG_WHEEL_BYTES);
    expect(install.seconds).toBeCloseTo(rates.measured.install.cpu_s + ZIGLANG_WHEEL_BYTES / rate, 0);
    expect(rates.measured.install.wheels).toBeGreaterThan(150);
    expect(rates.measured.install.python).toMatch(/^3\.12\./);
  });

  test("the README's table is this budget", () => {
    expect(readFileSync(join(root, 'README.md'), 'utf8')).toContain(budgetMarkdown(budget));
  });

  test('a budget over the limit says so', () => {
    const slow = startupBudget({ ...facts, wheel_bytes: facts.wheel_bytes * 4 }, rates);
    expect(slow.within).toBe(false);
    expect(slow.spare_fraction).toBeLessThan(REQUIRED_SPARE);
  });
});

describe('emit writes the budget of its submission', () => {
  const workdir = process.env.TERNFORGE_EMIT_TEST_WORKDIR;
  const out = workdir === undefined ? '' : join(workdir, '.ternforge', 'tiny', 'emit', 'outputs');

  test('evidence/startup-budget.json and .md, from the emitted manifest and wheels', () => {
    expect(workdir, 'the global setup sets TERNFORGE_EMIT_TEST_WORKDIR').toBeDefined();
    const json = join(out, 'evidence', 'startup-budget.json');
    expect(existsSync(json)).toBe(true);
    const budget = JSON.parse(readFileSync(json, 'utf8')) as StartupBudget;
    expect(schemas.validate('startup-budget.schema.json', budget)).toEqual([]);
    const manifest = JSON.parse(readFileSync(join(out, 'quantization_manifest.json'), 'utf8')) as QuantizationManifest;
    const wheels = JSON.parse(readFileSync(join(out, 'evidence', 'wheels.json'), 'utf8')) as WheelsRecord;
    const facts = submissionFacts(manifest, wheels);
    expect(budget.facts).toEqual(facts);
    expect(facts.engine).toBe('builtin'); // tiny vendors the CPU stack
    expect(facts.shard_bytes).toBe(manifest.shards.reduce((s, x) => s + x.size, 0));
    expect(facts.wheel_bytes).toBe(wheels.total_size - wheels.wheels.find((w) => w.name === 'uv')!.size);
    expect(budget).toEqual(startupBudget(facts, rates));
    expect(readFileSync(join(out, 'evidence', 'startup-budget.md'), 'utf8')).toContain(budgetMarkdown(budget));
  });
});
