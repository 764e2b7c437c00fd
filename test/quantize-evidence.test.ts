/** The quantize stage's evidence on tiny (shipped profile: gptq+kd): the shared build (test/global-setup.ts)
 * recorded the same figures every method's result carries (python/ternforge/quant/run.py result_of). */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';
import { FIGURES } from '../stages/quantize.ts';

const workdir = process.env.TERNFORGE_TINY_BUILD;

describe.skipIf(workdir === undefined)('quantize evidence on tiny', () => {
  test('records files, totals and both ternary fractions for gptq+kd', () => {
    const dir = join(workdir!, '.ternforge', 'tiny', 'quantize');
    const evidence = JSON.parse(readFileSync(join(dir, 'evidence.json'), 'utf8')) as { summary: Record<string, unknown> };
    const s = evidence.summary;
    expect(s['method']).toBe('gptq+kd');
    for (const k of FIGURES) expect(s[k], k).toBeDefined();
    const index = JSON.parse(readFileSync(join(dir, 'outputs', 'index.json'), 'utf8')) as { files: string[]; tensors: Record<string, { encoding: string }> };
    expect(s['files']).toEqual(index.files);
    const totals = s['totals'] as Record<string, number>;
    expect(totals['ternary_tensors']).toBe(Object.values(index.tensors).filter((t) => t.encoding === 'ternary').length);
    expect(s['ternary_fraction'] as number).toBeGreaterThan(0.95);
    expect(s['ternary_fraction_incl_embedding'] as number).toBeGreaterThan(0.85);
  });
});
