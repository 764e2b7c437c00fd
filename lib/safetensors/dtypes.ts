/**
 * The safetensors dtype whitelist: element size in bytes, and the rank the Python/Rust library sorts
 * tensors by when it writes a file (larger rank first, then name), which our writer reproduces.
 */
export const DTYPES = {
  BOOL: { size: 1, rank: 0 },
  U8: { size: 1, rank: 1 },
  I8: { size: 1, rank: 2 },
  F8_E5M2: { size: 1, rank: 3 },
  F8_E4M3: { size: 1, rank: 4 },
  I16: { size: 2, rank: 5 },
  U16: { size: 2, rank: 6 },
  F16: { size: 2, rank: 7 },
  BF16: { size: 2, rank: 8 },
  I32: { size: 4, rank: 9 },
  U32: { size: 4, rank: 10 },
  F32: { size: 4, rank: 11 },
  F64: { size: 8, rank: 12 },
  I64: { size: 8, rank: 13 },
  U64: { size: 8, rank: 14 },
} as const;

export type Dtype = keyof typeof DTYPES;

export function isDtype(value: unknown): value is Dtype {
  return typeof value === 'string' && Object.hasOwn(DTYPES, value);
}

/** Element count of a shape (an empty shape is a scalar: 1 element). Callers pass validated shapes. */
export function numel(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}

/** Bytes a tensor of this dtype and shape occupies. */
export function byteSize(dtype: Dtype, shape: readonly number[]): number {
  return numel(shape) * DTYPES[dtype].size;
}
