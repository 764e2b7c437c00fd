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
      .filter((f) => f.endsWith('.json') && !f.endsWith('.lock.json'))
      .map((f) => f.slice(0, -'.json'.length))
      .sort();
  } catch {
    return [];
  }
}


/** One `--set stage.key.sub=value`: the value is JSON when it parses as JSON, else the text itself. */
export interface Override {
  text: string;
  stage: string;
  keys: string[];
  value: JsonValue;
}

export function parseOverride(text: string, graph: Graph): Result<Override, Failure> {
  const eq = text.indexOf('=');
  const bad = (detail: string): Result<never, Failure> => err({ reason: 'invalid-override', text, detail });
  if (eq < 0) return bad('no "="');
  const [stage, ...keys] = text.slice(0, eq).split('.');
  if (stage === undefined || !graph.order.includes(stage)) return bad(`"${stage ?? ''}" is not a stage (known: ${graph.order.join(', ')})`);
  if (keys.length === 0 || keys.some((k) => k === '')) return bad('name a key inside the stage section');
  const raw = text.slice(eq + 1);
  let value: JsonValue;
  try {
    value = JSON.parse(raw) as JsonValue;
  } catch {
    value = raw;
  }
  return ok({ text, stage, keys, value });
}

/** The section with one override applied (a copy; missing objects on the way are created). */
function applyOverride(section: JsonValue, o: Override): Result<JsonValue, Failure> {
  const copy = structuredClone(section) as Record<string, JsonValue>;
  let at: Record<string, JsonValue> = copy;
  for (const k of o.keys.slice(0, -1)) {
    const next = at[k] ?? {};
    if (typeof next !== 'object' || next === null || Array.isArray(next)) return err({ reason: 'invalid-override', text: o.text, detail: `${o.stage}.${k} is not an object` });
    at = at[k] = next as Record<string, JsonValue>;
  }
  at[o.keys.at(-1)!] = o.value;
  return ok(copy);
}

/**
 * Reads, validates and returns the profile's sections. `overrides` (from `--set`) change sections after
 * the file is read and before it is validated again, so an override is held to the same schema; they
 * enter stage keys like any parameter, and the lock records the parameters a run used.
 */
export function loadProfile(root: string, name: string, graph: Graph, schemas: SchemaSet, overrides: readonly string[] = []): Result<LoadedProfile, Failure> {
  const known = knownProfiles(root);
  if (!known.includes(name)) return err({ reason: 'unknown-profile', profile: name, known });
  const path = join(root, 'profiles', `${name}.json`);
  const read = readJsonFile<{ name: string; stages: Record<string, JsonValue> }>(path, schemas, 'profile.schema.json', root);
  if (!read.ok) return read;
  const profile = read.value!;
  const shown = relative(root, path);
  if (overrides.length > 0) {
    for (const text of overrides) {
      const o = parseOverride(text, graph);
      if (!o.ok) return o;
      const applied = applyOverride(profile.stages[o.value.stage] ?? {}, o.value);
      if (!applied.ok) return applied;
      profile.stages[o.value.stage] = applied.value;
    }
    const errors = schemas.validate('profile.schema.json', profile);
    // One line, naming the override(s) the schema refuses: `--set quantize.nope=1: /stages/quantize must ...`.
    if (errors.length > 0) return err({ reason: 'invalid-override', text: overrides.join(' --set '), detail: `${errors.join('; ')} (${shown}'s schema)`, offSchema: true });
  }
  if (profile.name !== name) return err({ reason: 'invalid-json', path: shown, errors: [`/name is "${profile.name}", expected "${name}" (the file name)`] });
  const sections: Record<string, JsonValue> = {};
  for (const stage of graph.order) {
    const section = profile.stages[stage];
    if (section === undefined) return err({ reason: 'invalid-json', path: shown, errors: [`/stages must have required property '${stage}'`] });
    sections[stage] = section;
  }
  return ok({ name, sections });
}
