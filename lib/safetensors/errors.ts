/**
 * One reason per check, in the order the reader performs them (file order), then the sharded-index checks.
 * Every error names the file, the tensor where one is involved, and the expected and actual values.
 */
export type SafetensorsReason =
  /** The file is shorter than the 8-byte header length. */
  | 'header-too-small'
  /** The declared header length exceeds the 100 MB cap. */
  | 'header-too-large'
  /** 8 + header length runs past the end of the file. */
  | 'invalid-header-length'
  /** The header bytes are not valid UTF-8. */
  | 'invalid-header-utf8'
  /** The header is not valid JSON. */
  | 'invalid-header-json'
  /** An object of the header JSON names the same key twice (JSON.parse would keep the last one silently). */
  | 'duplicate-key'
  /** The JSON is not an object of {dtype, shape, data_offsets} entries plus an optional `__metadata__` string map. */
  | 'invalid-header-structure'
  /** A dtype outside the whitelist. */
  | 'unknown-dtype'
  /** The shape's element count times the dtype size overflows 64 bits. */
  | 'shape-overflow'
  /** The shape's byte size differs from the data_offsets span. */
  | 'span-mismatch'
  /** A tensor starts after the previous one ended (or the first after 0). */
  | 'offsets-gap'
  /** A tensor starts before the previous one ended. */
  | 'offsets-overlap'
  /** Bytes remain after the last tensor's end. */
  | 'trailing-bytes'
  /** The last tensor ends past the end of the file. */
  | 'truncated-data'
  /** The file could not be opened or read. */
  | 'io-error'
  /** `model.safetensors.index.json` is not JSON of the form {weight_map: {tensor: file}}. */
  | 'invalid-index'
  /** The checkpoint directory has neither an index nor `model.safetensors`. */
  | 'no-checkpoint'
  /** A file named by the index does not exist. */
  | 'index-file-missing'
  /** The index puts a tensor in a file that does not hold it. */
  | 'index-tensor-missing'
  /** A file holds a tensor that the index does not list (or lists in another file). */
  | 'index-tensor-unlisted'
  /** Two files hold a tensor of the same name. */
  | 'duplicate-tensor'
  /** A tensor was asked for that the file does not hold. */
  | 'unknown-tensor';

/** A value shown as expected or actual; 64-bit quantities beyond 2^53 are given as decimal strings. */
export type Fact = string | number;

export interface SafetensorsErrorFacts {
  reason: SafetensorsReason;
  file: string;
  tensor?: string;
  expected?: Fact;
  actual?: Fact;
  detail?: string;
}

/** The reader's and writer's one error type: data, with a kebab-case `reason` and the facts. */
export class SafetensorsError extends Error {
  readonly reason: SafetensorsReason;
  readonly file: string;
  readonly tensor: string | undefined;
  readonly expected: Fact | undefined;
  readonly actual: Fact | undefined;
  readonly detail: string | undefined;

  constructor(facts: SafetensorsErrorFacts) {
    super(describeSafetensorsError(facts));
    this.name = 'SafetensorsError';
    this.reason = facts.reason;
    this.file = facts.file;
    this.tensor = facts.tensor;
    this.expected = facts.expected;
    this.actual = facts.actual;
    this.detail = facts.detail;
  }

  /** The facts as plain JSON (for evidence records and stage failures). */
  toJSON(): SafetensorsErrorFacts {
    const out: SafetensorsErrorFacts = { reason: this.reason, file: this.file };
    if (this.tensor !== undefined) out.tensor = this.tensor;
    if (this.expected !== undefined) out.expected = this.expected;
    if (this.actual !== undefined) out.actual = this.actual;
    if (this.detail !== undefined) out.detail = this.detail;
    return out;
  }
}

/** One line naming the reason, the file, the tensor and expected/actual. */
export function describeSafetensorsError(f: SafetensorsErrorFacts): string {
  const parts = [`${f.reason}: ${f.file}`];
  if (f.tensor !== undefined) parts.push(`tensor ${JSON.stringify(f.tensor)}`);
  if (f.expected !== undefined) parts.push(`expected ${f.expected}`);
  if (f.actual !== undefined) parts.push(`actual ${f.actual}`);
  if (f.detail !== undefined) parts.push(f.detail);
  return parts.join(', ');
}

/** A bigint as a JSON-safe fact. */
export function fact(n: bigint | number): Fact {
  const b = BigInt(n);
  return b <= BigInt(Number.MAX_SAFE_INTEGER) && b >= -BigInt(Number.MAX_SAFE_INTEGER) ? Number(b) : b.toString();
}
