/**
 * Digests and canonical JSON. Every digest the engine persists is a lowercase sha256 hex string; the
 * brand keeps a file digest, an output digest and a stage key from being mixed up with plain strings.
 */
import { createHash } from 'node:crypto';

/** A lowercase 64-character sha256 hex digest. */
export type Sha256Hex = string & { readonly __brand: 'Sha256Hex' };

/** The sha256 of a file's raw bytes. */
export type FileSha256 = Sha256Hex & { readonly __kind: 'file' };
/** The sha256 of a stage's canonical output listing (see store.ts). */
export type OutputDigest = Sha256Hex & { readonly __kind: 'output' };
/** The sha256 of a stage's canonical key data (see key.ts). */
export type StageKey = Sha256Hex & { readonly __kind: 'key' };

const HEX64 = /^[0-9a-f]{64}$/;

export function isSha256Hex(value: string): value is Sha256Hex {
  return HEX64.test(value);
}

/** sha256 of a string (UTF-8) or bytes. */
export function sha256(data: string | Uint8Array): Sha256Hex {
  return createHash('sha256').update(data).digest('hex') as Sha256Hex;
}

/** A JSON value as the engine persists it. */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

/**
 * Canonical JSON: object keys sorted by code point at every depth, no whitespace, `undefined` members
 * dropped. Equal values give equal text, so its sha256 is a stable identity.
 */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(sortKeys(value));
}

/** Pretty, key-sorted JSON for human-readable files (lock, records), ending in a newline. */
export function prettyJson(value: unknown): string {
  return JSON.stringify(sortKeys(value), null, 2) + '\n';
}

function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const k of Object.keys(value).sort()) {
      const v = (value as Record<string, unknown>)[k];
      if (v !== undefined) out[k] = sortKeys(v);
    }
    return out;
  }
  return value;
}
