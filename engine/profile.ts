/**
 * Profiles: `<root>/profiles/<name>.json`, validated by ajv against `<root>/schemas/profile.schema.json`,
 * which `$ref`s each stage's own schema for its section (test/schemas.test.ts checks that those refs
 * are exactly the stages' declared `schema` files). A stage's section is what enters its key.
 */
import { readdirSync } from 'node:fs';
import { join, relative } from 'node:path';
import type { JsonValue } from './digest.ts';
import type { Failure } from './failure.ts';
import type { Graph } from './graph.ts';
import { readJsonFile, type SchemaSet } from './json-io.ts';
import { err, ok, type Result } from './result.ts';

export interface LoadedProfile {
  name: string;
  /** Stage name -> its validated section. */
  sections: Record<string, JsonValue>;
}

export function knownProfiles(root: string): string[] {
  try {
    return readdirSync(join(root, 'profiles'))
      .filter((f) => f.endsWith('.json'))
      .map((f) => f.slice(0, -'.json'.length))
      .sort();
  } catch {
    return [];
  }
}


export function loadProfile(root: string, name: string, graph: Graph, schemas: SchemaSet): Result<LoadedProfile, Failure> {
  const known = knownProfiles(root);
  if (!known.includes(name)) return err({ reason: 'unknown-profile', profile: name, known });
  const path = join(root, 'profiles', `${name}.json`);
  const read = readJsonFile<{ name: string; stages: Record<string, JsonValue> }>(path, schemas, 'profile.schema.json', root);
  if (!read.ok) return read;
  const profile = read.value!;
  const shown = relative(root, path);
  if (profile.name !== name) return err({ reason: 'invalid-json', path: shown, errors: [`/name is "${profile.name}", expected "${name}" (the file name)`] });
  const sections: Record<string, JsonValue> = {};
  for (const stage of graph.order) {
    const section = profile.stages[stage];
    if (section === undefined) return err({ reason: 'invalid-json', path: shown, errors: [`/stages must have required property '${stage}'`] });
    sections[stage] = section;
  }
  return ok({ name, sections });
}
