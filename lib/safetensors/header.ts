/**
 * Validation of a safetensors header, pure (no I/O), in file order, one reason per check:
 *
 *   [u64 LE n][n bytes UTF-8 JSON header, space padded][data: tensors back to back, in offset order]
 *
 * 1. the file holds the 8-byte length (`header-too-small`); 2. n <= 100 MB (`header-too-large`);
 * 3. 8 + n <= file size (`invalid-header-length`); 4. UTF-8 (`invalid-header-utf8`); 5. JSON
 * (`invalid-header-json`) with no key twice in one object (`duplicate-key`: the reference rejects it,
 * JSON.parse would keep the last); 6. structure (`invalid-header-structure`); 7. dtypes (`unknown-dtype`);
 * 8. shape x dtype size, overflow-checked, equals the span (`shape-overflow`, `span-mismatch`);
 * 9. offsets sorted, contiguous from 0 (`offsets-gap`, `offsets-overlap`); 10. the last end is the end of
 * the file (`trailing-bytes`, `truncated-data`). A `Header` exists only once all of these passed.
 */
import { err, ok, type Result } from '../../engine/result.ts';
import { DTYPES, isDtype, type Dtype } from './dtypes.ts';
import { SafetensorsError, fact } from './errors.ts';

/** The cap the reference implementation uses (MAX_HEADER_SIZE). */
export const MAX_HEADER_BYTES = 100_000_000n;
const U64_MAX = (1n << 64n) - 1n;

/** One tensor's entry, with offsets relative to the start of the data section. */
export interface TensorInfo {
  readonly name: string;
  readonly dtype: Dtype;
  readonly shape: readonly number[];
  /** Byte offset of the first byte, relative to the data section. */
  readonly begin: number;
  /** Byte offset one past the last byte, relative to the data section. */
  readonly end: number;
}

/** A validated header. */
export interface Header {
  /** The declared header length n (the JSON with its padding). */
  readonly headerLength: number;
  /** Absolute file offset of the data section: 8 + n. */
  readonly dataStart: number;
  /** `__metadata__`, if present. */
  readonly metadata: Readonly<Record<string, string>> | null;
  /** Tensors in offset order. */
  readonly tensors: readonly TensorInfo[];
}

/** Steps 1-3: the header length from the first 8 bytes (fewer if the file is shorter). */
export function checkHeaderLength(file: string, fileSize: number, prefix: Uint8Array): Result<number, SafetensorsError> {
  if (fileSize < 8 || prefix.length < 8) {
    return err(new SafetensorsError({ reason: 'header-too-small', file, expected: '>= 8 bytes', actual: fileSize }));
  }
  const n = new DataView(prefix.buffer, prefix.byteOffset, 8).getBigUint64(0, true);
  if (n > MAX_HEADER_BYTES) {
    return err(new SafetensorsError({ reason: 'header-too-large', file, expected: `<= ${MAX_HEADER_BYTES}`, actual: fact(n) }));
  }
  if (8n + n > BigInt(fileSize)) {
    return err(new SafetensorsError({ reason: 'invalid-header-length', file, expected: `<= ${fileSize - 8}`, actual: fact(n) }));
  }
  return ok(Number(n));
}

const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** Steps 4-10, given the n header bytes and the file's size. */
export function parseHeader(file: string, bytes: Uint8Array, fileSize: number): Result<Header, SafetensorsError> {
  const headerLength = bytes.length;
  let text: string;
  try {
    text = utf8.decode(bytes);
  } catch {
    return err(new SafetensorsError({ reason: 'invalid-header-utf8', file, detail: firstInvalidUtf8(bytes) }));
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    return err(new SafetensorsError({ reason: 'invalid-header-json', file, detail: (e as Error).message }));
  }
  const dup = duplicateKey(text);
  if (dup !== null) {
    return err(new SafetensorsError({ reason: 'duplicate-key', file, ...(dup.tensor !== undefined ? { tensor: dup.tensor } : {}), expected: 'each key once per object', actual: dup.key, detail: `key ${JSON.stringify(dup.key)} appears twice in ${dup.tensor === undefined ? 'the header object' : `the entry of ${JSON.stringify(dup.tensor)}`}` }));
  }

  // 6. structure
  if (!isPlainObject(json)) {
    return err(structure(file, undefined, 'a JSON object', kindOf(json)));
  }
  let metadata: Record<string, string> | null = null;
  const raw: Array<{ name: string; dtype: string; shape: number[]; begin: number; end: number }> = [];
  for (const [name, entry] of Object.entries(json)) {
    if (name === '__metadata__') {
      if (!isPlainObject(entry)) return err(structure(file, name, 'an object of strings', kindOf(entry)));
      for (const [k, v] of Object.entries(entry)) {
        if (typeof v !== 'string') return err(structure(file, name, `string value for ${JSON.stringify(k)}`, kindOf(v)));
      }
      metadata = entry as Record<string, string>;
      continue;
    }
    if (!isPlainObject(entry)) return err(structure(file, name, '{dtype, shape, data_offsets}', kindOf(entry)));
    const keys = Object.keys(entry).sort();
    if (keys.join(',') !== 'data_offsets,dtype,shape') {
      return err(structure(file, name, 'keys data_offsets, dtype, shape', keys.join(', ') || 'none'));
    }
    const { dtype, shape, data_offsets: offsets } = entry as Record<string, unknown>;
    if (typeof dtype !== 'string') return err(structure(file, name, 'dtype a string', kindOf(dtype)));
    if (!Array.isArray(shape) || !shape.every(isSize)) {
      return err(structure(file, name, 'shape an array of non-negative integers', JSON.stringify(shape)));
    }
    if (!Array.isArray(offsets) || offsets.length !== 2 || !offsets.every(isSize) || offsets[1] < offsets[0]) {
      return err(structure(file, name, 'data_offsets [begin, end] with 0 <= begin <= end', JSON.stringify(offsets)));
    }
    raw.push({ name, dtype, shape, begin: offsets[0], end: offsets[1] });
  }
  raw.sort((a, b) => a.begin - b.begin || a.end - b.end || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));

  // 7. dtypes
  for (const t of raw) {
    if (!isDtype(t.dtype)) {
      return err(new SafetensorsError({ reason: 'unknown-dtype', file, tensor: t.name, expected: Object.keys(DTYPES).join('|'), actual: t.dtype }));
    }
  }
  // 8. shape x size == span, overflow-checked in 64 bits like the reference implementation
  for (const t of raw) {
    let bytesNeeded = BigInt(DTYPES[t.dtype as Dtype].size);
    for (const d of t.shape) {
      bytesNeeded *= BigInt(d);
      if (bytesNeeded > U64_MAX) {
        return err(new SafetensorsError({ reason: 'shape-overflow', file, tensor: t.name, expected: `<= ${U64_MAX} bytes`, actual: `shape ${JSON.stringify(t.shape)}` }));
      }
    }
    const span = BigInt(t.end - t.begin);
    if (bytesNeeded !== span) {
      return err(new SafetensorsError({ reason: 'span-mismatch', file, tensor: t.name, expected: fact(bytesNeeded), actual: fact(span), detail: `${t.dtype} ${JSON.stringify(t.shape)} vs data_offsets [${t.begin}, ${t.end}]` }));
    }
  }
  // 9. contiguous from 0
  let cursor = 0;
  for (const t of raw) {
    if (t.begin > cursor) {
      return err(new SafetensorsError({ reason: 'offsets-gap', file, tensor: t.name, expected: cursor, actual: t.begin }));
    }
    if (t.begin < cursor) {
      return err(new SafetensorsError({ reason: 'offsets-overlap', file, tensor: t.name, expected: cursor, actual: t.begin }));
    }
    cursor = t.end;
  }
  // 10. the data section ends exactly at the end of the file
  const dataStart = 8 + headerLength;
  const dataBytes = fileSize - dataStart;
  const last = raw.at(-1)?.name;
  if (cursor < dataBytes) {
    return err(new SafetensorsError({ reason: 'trailing-bytes', file, ...(last === undefined ? {} : { tensor: last }), expected: dataStart + cursor, actual: fileSize, detail: 'file size' }));
  }
  if (cursor > dataBytes) {
    return err(new SafetensorsError({ reason: 'truncated-data', file, ...(last === undefined ? {} : { tensor: last }), expected: dataStart + cursor, actual: fileSize, detail: 'file size' }));
  }
  const tensors: TensorInfo[] = raw.map((t) => Object.freeze({ name: t.name, dtype: t.dtype as Dtype, shape: Object.freeze([...t.shape]), begin: t.begin, end: t.end }));
  return ok({ headerLength, dataStart, metadata: metadata === null ? null : Object.freeze({ ...metadata }), tensors: Object.freeze(tensors) });
}

function structure(file: string, tensor: string | undefined, expected: string, actual: string): SafetensorsError {
  return new SafetensorsError({ reason: 'invalid-header-structure', file, ...(tensor === undefined ? {} : { tensor }), expected, actual });
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function isSize(v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
}

function kindOf(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  return typeof v;
}

/** Offset of the first byte that starts an invalid UTF-8 sequence (for the error's detail). */
function firstInvalidUtf8(bytes: Uint8Array): string {
  let i = 0;
  while (i < bytes.length) {
    const b = bytes[i]!;
    // [sequence length, smallest valid second byte, largest valid second byte] per lead byte (RFC 3629)
    const [len, lo, hi] =
      b < 0x80 ? [1, 0, 0] : b >= 0xc2 && b <= 0xdf ? [2, 0x80, 0xbf] : b === 0xe0 ? [3, 0xa0, 0xbf] : b === 0xed ? [3, 0x80, 0x9f]
        : b >= 0xe1 && b <= 0xef ? [3, 0x80, 0xbf] : b === 0xf0 ? [4, 0x90, 0xbf] : b >= 0xf1 && b <= 0xf3 ? [4, 0x80, 0xbf]
          : b === 0xf4 ? [4, 0x80, 0x8f] : [0, 0, 0];
    if (len === 0 || i + len > bytes.length) break;
    if (len > 1 && (bytes[i + 1]! < lo || bytes[i + 1]! > hi)) break;
    let j = 2;
    while (j < len && (bytes[i + j]! & 0xc0) === 0x80) j++;
    if (j < len) break;
    i += len;
  }
  return `invalid UTF-8 sequence at header byte ${i}`;
}

/**
 * The first key named twice in one object of `text` (already known to be valid JSON), compared after
 * unescaping (`"a"` and `"\\u0061"` are the same key); `tensor` is the top-level entry it is inside, if any.
 */
export function duplicateKey(text: string): { key: string; tensor?: string } | null {
  interface Frame {
    readonly keys: Set<string> | null; // null for arrays
    expectKey: boolean;
    readonly owner: string | undefined; // the top-level key this object is (inside)
    lastKey: string | undefined;
  }
  const stack: Frame[] = [];
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22 /* " */) {
      let j = i + 1;
      while (text.charCodeAt(j) !== 0x22) j += text.charCodeAt(j) === 0x5c /* \ */ ? 2 : 1;
      const top = stack[stack.length - 1];
      if (top?.keys != null && top.expectKey) {
        const key = JSON.parse(text.slice(i, j + 1)) as string;
        if (top.keys.has(key)) return stack.length === 1 ? { key } : { key, ...(top.owner !== undefined ? { tensor: top.owner } : {}) };
        top.keys.add(key);
        top.lastKey = key;
        top.expectKey = false;
      }
      i = j;
    } else if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      const parent = stack[stack.length - 1];
      const owner = stack.length === 1 ? parent!.lastKey : parent?.owner;
      stack.push({ keys: c === 0x7b ? new Set() : null, expectKey: c === 0x7b, owner, lastKey: undefined });
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      stack.pop();
    } else if (c === 0x2c /* , */) {
      const top = stack[stack.length - 1];
      if (top?.keys != null) top.expectKey = true;
    }
  }
  return null;
}
