import type { SafetensorsErrorFacts } from '../safetensors/errors.ts';

/** Every way pack refuses its input, with the facts to act on. Nothing is left written when one occurs. */
export type PackFailure =
  /** index.json is missing, not JSON, or fails schemas/interchange-index.schema.json. */
  | { reason: 'invalid-interchange-index'; path: string; errors: string[] }
  /** A safetensors file of the interchange failed the strict reader. */
  | { reason: 'invalid-safetensors'; error: SafetensorsErrorFacts }
  /** index.json names a tensor (or a ternary tensor's `.scale`) that its file does not hold. */
  | { reason: 'interchange-tensor-missing'; tensor: string; file: string }
  /** A stored tensor's dtype or shape differs from what index.json (or the ternary contract) says. */
  | { reason: 'interchange-tensor-mismatch'; tensor: string; file: string; field: 'dtype' | 'shape'; expected: string; actual: string }
  /** A safetensors file holds a tensor index.json does not account for. */
  | { reason: 'unexpected-tensor'; tensor: string; file: string }
  /** A ternary tensor has no group_size. */
  | { reason: 'missing-group-size'; tensor: string }
  /** g is not a positive multiple of 4 dividing the row length. */
  | { reason: 'invalid-group-size'; tensor: string; groupSize: number; rowLength: number }
  /** `<name>.scale` is not F32 [out, in / g]. */
  | { reason: 'scale-shape-mismatch'; tensor: string; expected: string; actual: string }
  /** An I8 code outside {-1, 0, 1}. */
  | { reason: 'invalid-ternary-value'; tensor: string; row: number; col: number; value: number }
  /** The embedding is tied but the interchange also holds a separate output head. */
  | { reason: 'tied-head-present'; tensor: string; tiedTo: string };

/** One line for logs and stage failures. */
export function describePackFailure(f: PackFailure): string {
  switch (f.reason) {
    case 'invalid-interchange-index':
      return `${f.reason}: ${f.path}: ${f.errors.join('; ')}`;
    case 'invalid-safetensors':
      return `${f.reason}: ${f.error.reason} in ${f.error.file}${f.error.tensor === undefined ? '' : ` (tensor ${f.error.tensor})`}${f.error.expected === undefined ? '' : `, expected ${f.error.expected}`}${f.error.actual === undefined ? '' : `, actual ${f.error.actual}`}`;
    case 'interchange-tensor-missing':
    case 'unexpected-tensor':
      return `${f.reason}: ${f.tensor} in ${f.file}`;
    case 'interchange-tensor-mismatch':
      return `${f.reason}: ${f.tensor} in ${f.file}: ${f.field} expected ${f.expected}, actual ${f.actual}`;
    case 'missing-group-size':
      return `${f.reason}: ${f.tensor}`;
    case 'invalid-group-size':
      return `${f.reason}: ${f.tensor}: g=${f.groupSize} must be a multiple of 4 dividing the row length ${f.rowLength}`;
    case 'scale-shape-mismatch':
      return `${f.reason}: ${f.tensor}: expected ${f.expected}, actual ${f.actual}`;
    case 'invalid-ternary-value':
      return `${f.reason}: ${f.tensor}[${f.row}, ${f.col}] = ${f.value}, expected -1, 0 or 1`;
    case 'tied-head-present':
      return `${f.reason}: ${f.tiedTo} is tied to ${f.tensor} but the interchange stores it separately`;
  }
}
