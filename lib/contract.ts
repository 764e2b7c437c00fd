/**
 * schemas/contract.json, the values TypeScript and Python must agree on (exempt tensor prefixes, gate
 * thresholds, the packing convention with golden bytes, the submission's file names, the penalty range),
 * read once and checked against schemas/contract.schema.json. The Python side reads the same file through
 * python/ternforge_server/contract.py (python/tests/test_contract.py holds both to it); emit ships it in the
 * submission's server package.
 *
 * Read on first use, never at import: compiling its schema costs ~100 ms, which a no-op pipeline run must
 * not pay.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { SchemaSet } from '../engine/json-io.ts';
import type { Contract } from '../schemas/generated/contract.ts';

/** Where the contract lives in this repository. */
export const CONTRACT_PATH = join(import.meta.dirname, '..', 'schemas', 'contract.json');
export const CONTRACT_SCHEMA = 'contract.schema.json';

function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object') {
    for (const v of Object.values(value)) deepFreeze(v);
    Object.freeze(value);
  }
  return value;
}

/** Read and validate a contract file; throws (a broken repository, not a user error) naming the file. */
export function readContract(path: string = CONTRACT_PATH): Contract {
  let value: unknown;
  try {
    value = JSON.parse(readFileSync(path, 'utf8'));
  } catch (e) {
    throw new Error(`${path}: cannot read the contract: ${(e as Error).message}`);
  }
  const errors = new SchemaSet(join(import.meta.dirname, '..', 'schemas')).validate(CONTRACT_SCHEMA, value);
  if (errors.length > 0) throw new Error(`${path} fails schemas/${CONTRACT_SCHEMA}: ${errors.join('; ')}`);
  return deepFreeze(value as Contract);
}

let loaded: Contract | undefined;
/** This repository's contract (read and validated once). */
export function contract(): Contract {
  loaded ??= readContract();
  return loaded;
}

/** A source tensor the text model does not use (vision tower, MTP head): its name starts with an exempt prefix. */
export function isExemptName(name: string): boolean {
  return contract().tensors.exempt_prefixes.some((p) => name.startsWith(p));
}

/** Input embedding or output head: outside the gates' audited set. */
export function isEmbeddingOrHead(name: string): boolean {
  const t = contract().tensors;
  return name === t.output_head || name.endsWith(t.embedding_suffix);
}
