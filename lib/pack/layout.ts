/**
 * The 2-bit packing convention (DESIGN.md section 2), the one place it is written down in TypeScript:
 *
 *     ternary t in {-1, 0, 1}  ->  code c = t + 1 in {0, 1, 2}       (code 3 is invalid)
 *     four codes per byte, least significant bits first, row-major:
 *         byte = c0 | c1 << 2 | c2 << 4 | c3 << 6     (t = [-1, 0, 1, -1] -> 0b00_10_01_00 = 0x24)
 *     codes:  U8  [out, in / 4]
 *     scales: F32 [out, in / g], g a multiple of 4 that divides `in`, groups of consecutive columns
 *     W[o, i] = (c[o, i] - 1) * scale[o, floor(i / g)]
 *
 * Because a row's length is a multiple of 4, packing row-major [out, in] equals packing the flat array, so
 * the kernels below work on flat byte runs (whole rows, or any chunk whose length is a multiple of 4).
 *
 * Whole 64-code blocks go through WebAssembly SIMD kernels (kernels.wat, compiled into kernels.wasm.ts by
 * scripts/gen-wasm.ts), a BLOCK at a time copied into the kernels' memory, small enough to stay in cache.
 * `packCodes` / `unpackCodes` build their result in that memory (a copy out of WebAssembly memory is slow
 * in V8); `packInto` / `unpackInto` copy each block out to the caller's array. What is left over goes
 * through the scalar word kernels, which are also exported as the reference the tests compare with. The scalar ones work on 32-bit words (little-endian
 * hosts): pack turns each word of four int8 values into one byte with a few carry-free bit operations,
 * unpack maps each byte to the word of its four int8 values through a 256-entry table. The Python reader
 * is python/ternforge_server/packing.py.
 */
import { endianness } from 'node:os';
import { err, ok, type Result } from '../../engine/result.ts';
import { WASM_BYTES } from './kernels.wasm.ts';

export const CODE_BITS = 2;
export const CODES_PER_BYTE = 4;
export const INVALID_CODE = 0b11;

/** Why a pack or unpack was refused; `index` is the flat element (pack) or byte (unpack) index. */
export type CodeError =
  | { reason: 'invalid-ternary-value'; index: number; value: number }
  | { reason: 'invalid-code'; index: number; byte: number; field: number }
  | { reason: 'shape-mismatch'; expected: string; actual: string };

/** byte -> its four int8 values (c - 1) as one little-endian word; a 0b11 field maps to a -2 byte (never read). */
const UNPACK_BYTE = ((): Int32Array => {
  const table = new Int32Array(256);
  for (let b = 0; b < 256; b++) {
    let word = 0;
    for (let k = 0; k < CODES_PER_BYTE; k++) word |= ((((b >> (CODE_BITS * k)) & 0b11) - 1) & 0xff) << (8 * k);
    table[b] = word;
  }
  return table;
})();

function requireLittleEndian(): void {
  if (endianness() !== 'LE') throw new Error('lib/pack: the word-table kernels assume a little-endian host');
}

// How packInto turns one word of four int8 values t0..t3 into one byte:
// y = (t + 1) mod 256 per byte: the code c when t is ternary; any other t leaves a bit above the low two,
// except t = 2, whose y = 3 is caught as a 0b11 field of the packed byte.
// z = y | y >>> 6 puts c1 next to c0 (bits 2-3) and c3 next to c2 (bits 18-19); z | z >>> 12 moves c2 c3
// into bits 4-7. The caller keeps the low 8 bits.

/** Codes per kernel call: a 256 KiB block of int8 (or its 64 KiB packed form) copied in, in cache. */
export const BLOCK = 1 << 18;
const PAGE = 65536;
/** The largest WebAssembly memory asked for (wasm32 allows 4 GiB); bigger outputs go through blocks. */
const MAX_MEMORY = 2 ** 31;

interface Kernels {
  pack: (src: number, dst: number, n: number) => number;
  unpack: (src: number, dst: number, n: number) => number;
  memory: WebAssembly.Memory;
}
let compiled: WebAssembly.Module | undefined;
let scratch: Kernels | undefined;

/** The kernels on a fresh memory of at least `bytes` (zero pages cost nothing until written). */
function kernelsWith(bytes: number): Kernels {
  compiled ??= new WebAssembly.Module(WASM_BYTES);
  const memory = new WebAssembly.Memory({ initial: Math.max(1, Math.ceil(bytes / PAGE)) });
  const e = new WebAssembly.Instance(compiled, { pack: { memory } }).exports;
  return { pack: e['pack'] as Kernels['pack'], unpack: e['unpack'] as Kernels['unpack'], memory };
}

/**
 * Packs whole 64-code blocks of `bytes` (length a multiple of 64) into `k.memory` at `at`, a BLOCK at a time
 * through the scratch region [0, BLOCK). Returns false when some value was outside {-1, 0, 1}.
 */
function packBlocks(k: Kernels, bytes: Uint8Array, at: number): boolean {
  const mem = new Uint8Array(k.memory.buffer);
  for (let o = 0; o < bytes.length; o += BLOCK) {
    const len = Math.min(BLOCK, bytes.length - o);
    mem.set(bytes.subarray(o, o + len), 0);
    if (k.pack(0, at + o / CODES_PER_BYTE, len) !== 0) return false;
  }
  return true;
}

/** Unpacks whole 16-byte blocks of `packed` into `k.memory` at `at` through the scratch region [0, BLOCK / 4). */
function unpackBlocks(k: Kernels, packed: Uint8Array, at: number): boolean {
  const mem = new Uint8Array(k.memory.buffer);
  const step = BLOCK / CODES_PER_BYTE;
  for (let o = 0; o < packed.length; o += step) {
    const len = Math.min(step, packed.length - o);
    mem.set(packed.subarray(o, o + len), 0);
    if (k.unpack(0, at + o * CODES_PER_BYTE, len) !== 0) return false;
  }
  return true;
}

/**
 * Packs `src` (int8 ternary values, length a multiple of 4) into `dst` (length src.length / 4).
 * Returns -1, or the index of the first value outside {-1, 0, 1} (dst is then unspecified).
 * Each block's packed bytes are copied out to `dst`; packCodes, which owns its result, writes in place.
 */
export function packInto(src: Int8Array | Uint8Array, dst: Uint8Array): number {
  const n = src.length;
  if (n % CODES_PER_BYTE !== 0 || dst.length !== n / CODES_PER_BYTE) throw new RangeError(`packInto: ${n} values into ${dst.length} bytes`);
  const bulk = n - (n % 64);
  scratch ??= kernelsWith(BLOCK + BLOCK / CODES_PER_BYTE);
  const bytes = new Uint8Array(src.buffer, src.byteOffset, n);
  const mem = new Uint8Array(scratch.memory.buffer);
  for (let o = 0; o < bulk; o += BLOCK) {
    const len = Math.min(BLOCK, bulk - o);
    if (!packBlocks(scratch, bytes.subarray(o, o + len), BLOCK)) return firstNonTernary(src);
    dst.set(mem.subarray(BLOCK, BLOCK + len / CODES_PER_BYTE), o / CODES_PER_BYTE);
  }
  return packTail(src, dst, bulk);
}

/**
 * Unpacks `src` (packed bytes) into `dst` (int8, length 4 * src.length).
 * Returns -1, or the index of the first byte holding the invalid code 3 (dst is then unspecified).
 */
export function unpackInto(src: Uint8Array, dst: Int8Array): number {
  const n = src.length;
  if (dst.length !== n * CODES_PER_BYTE) throw new RangeError(`unpackInto: ${n} bytes into ${dst.length} values`);
  const bulk = n - (n % 16);
  const step = BLOCK / CODES_PER_BYTE;
  scratch ??= kernelsWith(BLOCK + BLOCK / CODES_PER_BYTE);
  const mem = new Uint8Array(scratch.memory.buffer);
  const out = new Uint8Array(dst.buffer, dst.byteOffset, dst.length);
  for (let o = 0; o < bulk; o += step) {
    const len = Math.min(step, bulk - o);
    if (!unpackBlocks(scratch, src.subarray(o, o + len), step)) return firstInvalidByte(src);
    out.set(mem.subarray(step, step + len * CODES_PER_BYTE), o * CODES_PER_BYTE);
  }
  return unpackTail(src, dst, bulk);
}

function packTail(src: Int8Array | Uint8Array, dst: Uint8Array, from: number): number {
  if (from === src.length) return -1;
  const bad = packWords(src.subarray(from), dst.subarray(from / CODES_PER_BYTE));
  return bad < 0 ? -1 : from + bad;
}

function unpackTail(src: Uint8Array, dst: Int8Array, from: number): number {
  if (from === src.length) return -1;
  const bad = unpackWords(src.subarray(from), dst.subarray(from * CODES_PER_BYTE));
  return bad < 0 ? -1 : from + bad;
}

function firstNonTernary(values: Int8Array | Uint8Array): number {
  const v = new Int8Array(values.buffer, values.byteOffset, values.length);
  for (let k = 0; k < v.length; k++) if (v[k]! < -1 || v[k]! > 1) return k;
  return -1;
}

/** The scalar pack on 32-bit words (the reference for the SIMD kernel; packInto's tail). Same contract as packInto. */
export function packWords(src: Int8Array | Uint8Array, dst: Uint8Array): number {
  requireLittleEndian();
  const n = src.length;
  if (n % CODES_PER_BYTE !== 0 || dst.length !== n / CODES_PER_BYTE) throw new RangeError(`packWords: ${n} values into ${dst.length} bytes`);
  const input = src.byteOffset % 4 === 0 ? src : new Uint8Array(src); // a copy starts at offset 0
  const output = dst.byteOffset % 4 === 0 ? dst : new Uint8Array(dst.length);
  // Int32 views keep V8 on small integers (a Uint32 above 2^31 would become a heap number).
  const words = new Int32Array(input.buffer, input.byteOffset, n / 4);
  const quads = Math.floor(output.length / 4);
  const out = new Int32Array(output.buffer, output.byteOffset, quads);
  let bad = 0;
  let bad3 = 0;
  let i = 0;
  for (let j = 0; j < quads; j++, i += 4) {
    let w = words[i]!;
    let y = ((w & 0x7f7f7f7f) + 0x01010101) ^ (w & 0x80808080);
    let z = y | (y >>> 6);
    bad |= y;
    const b0 = (z | (z >>> 12)) & 0xff;
    w = words[i + 1]!;
    y = ((w & 0x7f7f7f7f) + 0x01010101) ^ (w & 0x80808080);
    z = y | (y >>> 6);
    bad |= y;
    const b1 = (z | (z >>> 12)) & 0xff;
    w = words[i + 2]!;
    y = ((w & 0x7f7f7f7f) + 0x01010101) ^ (w & 0x80808080);
    z = y | (y >>> 6);
    bad |= y;
    const b2 = (z | (z >>> 12)) & 0xff;
    w = words[i + 3]!;
    y = ((w & 0x7f7f7f7f) + 0x01010101) ^ (w & 0x80808080);
    z = y | (y >>> 6);
    bad |= y;
    const b3 = (z | (z >>> 12)) & 0xff;
    const o = b0 | (b1 << 8) | (b2 << 16) | (b3 << 24);
    bad3 |= o & (o >>> 1); // t = 2 gives y = 3, which passes the mask above but leaves a 0b11 field
    out[j] = o;
  }
  for (; i < words.length; i++) {
    const w = words[i]!;
    const y = ((w & 0x7f7f7f7f) + 0x01010101) ^ (w & 0x80808080);
    const z = y | (y >>> 6);
    bad |= y;
    const o = (z | (z >>> 12)) & 0xff;
    bad3 |= o & (o >>> 1);
    output[i] = o;
  }
  if (output !== dst) dst.set(output);
  if ((bad & 0xfcfcfcfc) === 0 && (bad3 & 0x55555555) === 0) return -1;
  return firstNonTernary(input); // a flagged word holds a non-ternary byte
}

/** The scalar unpack through a byte -> word table (the reference for the SIMD kernel; unpackInto's tail). */
export function unpackWords(src: Uint8Array, dst: Int8Array): number {
  requireLittleEndian();
  const n = src.length;
  if (dst.length !== n * CODES_PER_BYTE) throw new RangeError(`unpackWords: ${n} bytes into ${dst.length} values`);
  const input = src.byteOffset % 4 === 0 ? src : new Uint8Array(src);
  const output = dst.byteOffset % 4 === 0 ? dst : new Int8Array(dst.length);
  const quads = Math.floor(n / 4);
  const words = new Int32Array(input.buffer, input.byteOffset, quads);
  const out = new Int32Array(output.buffer, output.byteOffset, n);
  const table = UNPACK_BYTE;
  let bad = 0;
  let i = 0;
  for (let j = 0; j < quads; j++, i += 4) {
    const w = words[j]!;
    bad |= w & (w >>> 1);
    out[i] = table[w & 0xff]!;
    out[i + 1] = table[(w >>> 8) & 0xff]!;
    out[i + 2] = table[(w >>> 16) & 0xff]!;
    out[i + 3] = table[w >>> 24]!;
  }
  for (; i < n; i++) {
    const b = input[i]!;
    bad |= b & (b >>> 1);
    out[i] = table[b]!;
  }
  if (output !== dst) dst.set(output);
  if ((bad & 0x55555555) === 0) return -1;
  return firstInvalidByte(src);
}

/** Index of the first byte with a 0b11 field, or -1. */
export function firstInvalidByte(bytes: Uint8Array): number {
  for (let i = 0; i < bytes.length; i++) {
    const b = bytes[i]!;
    if ((b & (b >>> 1) & 0b01010101) !== 0) return i;
  }
  return -1;
}

/** Which 2-bit field (0-3, least significant first) of a byte holds the first code 3. */
function invalidField(byte: number): number {
  for (let k = 0; k < CODES_PER_BYTE; k++) if (((byte >> (CODE_BITS * k)) & 0b11) === INVALID_CODE) return k;
  return -1;
}

/** int8 ternary [rows, cols] (row-major, cols % 4 == 0) -> U8 [rows, cols / 4]. */
export function packCodes(values: Int8Array, rows: number, cols: number): Result<Uint8Array, CodeError> {
  if (cols % CODES_PER_BYTE !== 0 || values.length !== rows * cols) {
    return err({ reason: 'shape-mismatch', expected: `[${rows}, ${cols}] with cols % 4 == 0`, actual: `${values.length} values` });
  }
  const n = values.length;
  const bulk = n - (n % 64);
  let out: Uint8Array;
  let bad: number;
  if (BLOCK + n / CODES_PER_BYTE <= MAX_MEMORY) {
    // The result lives in the kernels' memory after the scratch block: no copy out.
    const k = kernelsWith(BLOCK + n / CODES_PER_BYTE);
    out = new Uint8Array(k.memory.buffer, BLOCK, n / CODES_PER_BYTE);
    bad = packBlocks(k, new Uint8Array(values.buffer, values.byteOffset, bulk), BLOCK) ? packTail(values, out, bulk) : firstNonTernary(values);
  } else {
    out = new Uint8Array(n / CODES_PER_BYTE);
    bad = packInto(values, out);
  }
  return bad < 0 ? ok(out) : err({ reason: 'invalid-ternary-value', index: bad, value: values[bad]! });
}

/** U8 [rows, cols / 4] -> int8 ternary [rows, cols]; refuses any byte holding the code 3. */
export function unpackCodes(packed: Uint8Array, rows: number, cols: number): Result<Int8Array, CodeError> {
  if (cols % CODES_PER_BYTE !== 0 || packed.length * CODES_PER_BYTE !== rows * cols) {
    return err({ reason: 'shape-mismatch', expected: `[${rows}, ${cols / CODES_PER_BYTE}] bytes`, actual: `${packed.length} bytes` });
  }
  const n = packed.length;
  const bulk = n - (n % 16);
  const step = BLOCK / CODES_PER_BYTE;
  let out: Int8Array;
  let bad: number;
  if (step + n * CODES_PER_BYTE <= MAX_MEMORY) {
    const k = kernelsWith(step + n * CODES_PER_BYTE);
    out = new Int8Array(k.memory.buffer, step, n * CODES_PER_BYTE);
    bad = unpackBlocks(k, packed.subarray(0, bulk), step) ? unpackTail(packed, out, bulk) : firstInvalidByte(packed);
  } else {
    out = new Int8Array(n * CODES_PER_BYTE);
    bad = unpackInto(packed, out);
  }
  return bad < 0 ? ok(out) : err({ reason: 'invalid-code', index: bad, byte: packed[bad]!, field: invalidField(packed[bad]!) });
}

/** Why a group size was refused. */
export interface GroupSizeError {
  reason: 'invalid-group-size';
  tensor: string;
  groupSize: number;
  rowLength: number;
}

/** g must be a positive multiple of 4 that divides the row length. */
export function checkGroupSize(tensor: string, groupSize: number, rowLength: number): Result<number, GroupSizeError> {
  const valid = Number.isSafeInteger(groupSize) && groupSize > 0 && groupSize % CODES_PER_BYTE === 0 && rowLength % groupSize === 0;
  return valid ? ok(groupSize) : err({ reason: 'invalid-group-size', tensor, groupSize, rowLength });
}
