import { ok } from '../engine/result.ts';
import { defineStage, type StageDef } from '../engine/types.ts';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';

/**
 * A stage that a later issue fills in. It runs (so `all` goes end to end), says so in its log, and
 * writes a `PLACEHOLDER` file so nobody mistakes its empty output for a real result.
 */
export function placeholderStage(name: string, summary: string, issue: string): StageDef<Record<string, unknown>> {
  return defineStage<Record<string, unknown>>({
    name,
    summary: `${summary} (placeholder until ${issue})`,
    code: [`stages/${name}.ts`, 'stages/placeholder.ts'],
    schema: `schemas/stages/${name}.schema.json`,
    async run(ctx) {
      ctx.log(`${name} is a placeholder: ${issue} implements it; nothing was done`);
      await writeFile(join(ctx.out, 'PLACEHOLDER'), `${name}: not implemented yet (${issue})\n`);
      return ok({ summary: { placeholder: true } });
    },
  });
}
