/** schemas/ is the source of truth: generated types are current, every profile validates, the profile schema refs each stage's schema. */
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, test } from 'vitest';
import { SchemaSet } from '../engine/json-io.ts';
import { pipeline } from '../pipeline.ts';
import { generateAll } from '../scripts/gen-types.ts';

const root = join(import.meta.dirname, '..');

describe('schemas', () => {
  test('generated types are not stale (npm run gen:types)', async () => {
    const stale: string[] = [];
    for (const { path, text } of await generateAll()) {
      let current: string | null = null;
      try {
        current = readFileSync(path, 'utf8');
      } catch {
        current = null;
      }
      if (current !== text) stale.push(relative(root, path));
    }
    expect(stale).toEqual([]);
  });

  test('every profiles/*.json validates against schemas/profile.schema.json and is named after its file', () => {
    const schemas = new SchemaSet(join(root, 'schemas'));
    const files = readdirSync(join(root, 'profiles')).filter((f) => f.endsWith('.json') && !f.endsWith('.lock.json')).sort();
    expect(files.length).toBeGreaterThanOrEqual(3);
    for (const f of files) {
      const profile = JSON.parse(readFileSync(join(root, 'profiles', f), 'utf8')) as { name: string };
      expect({ file: f, errors: schemas.validate('profile.schema.json', profile) }).toEqual({ file: f, errors: [] });
      expect(profile.name).toBe(f.replace(/\.json$/, ''));
    }
  });

  test('every committed profiles/*.lock.json validates against schemas/engine/pin-lock.schema.json and names its profile', () => {
    const schemas = new SchemaSet(join(root, 'schemas'));
    for (const f of readdirSync(join(root, 'profiles')).filter((x) => x.endsWith('.lock.json')).sort()) {
      const lock = JSON.parse(readFileSync(join(root, 'profiles', f), 'utf8')) as { profile: string };
      expect({ file: f, errors: schemas.validate('engine/pin-lock.schema.json', lock) }).toEqual({ file: f, errors: [] });
      expect(lock.profile).toBe(f.replace(/\.lock\.json$/, ''));
    }
  });

  test("the profile schema refs exactly each stage's declared schema", () => {
    const profileSchema = JSON.parse(readFileSync(join(root, 'schemas', 'profile.schema.json'), 'utf8')) as {
      properties: { stages: { properties: Record<string, { $ref: string }>; required: string[] } };
    };
    const declared = Object.fromEntries(pipeline.stages.map(({ stage }) => [stage.name, relative(join(root, 'schemas'), join(root, stage.schema))]));
    const referenced = Object.fromEntries(Object.entries(profileSchema.properties.stages.properties).map(([k, v]) => [k, v.$ref]));
    expect(referenced).toEqual(declared);
    expect([...profileSchema.properties.stages.required].sort()).toEqual(Object.keys(declared).sort());
  });

  test('an invalid value is reported with its path', () => {
    const schemas = new SchemaSet(join(root, 'schemas'));
    expect(schemas.validate('engine/workspace-lock.schema.json', { pid: 0, hostname: 'h', command: 'c', since: 's', extra: 1 })).toEqual([
      '/ must NOT have additional properties (extra)',
      '/pid must be >= 1',
    ]);
  });

  test("check: a value this program made that fails its schema throws, naming the file, the schema and each field", () => {
    const schemas = new SchemaSet(join(root, 'schemas'));
    expect(() => schemas.check('engine/workspace-lock.schema.json', { pid: 1, hostname: 'h', command: 'c', since: 's' }, 'lock')).not.toThrow();
    expect(() => schemas.check('engine/workspace-lock.schema.json', { pid: 0, hostname: 'h', command: 'c', since: 's', extra: 1 }, 'lock.json')).toThrow(
      'lock.json fails its own schema (schemas/engine/workspace-lock.schema.json): / must NOT have additional properties (extra); /pid must be >= 1',
    );
  });
});
