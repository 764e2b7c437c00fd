/**
 * Gates 1 and 2 of DESIGN.md section 2, as arithmetic over counted elements. The thresholds are constants of
 * the contract (schemas/contract.json), the same for every profile.
 *
 * - ternary fraction = codes / (codes + scales + floats), which must exceed 0.95;
 * - stored / original = (codes + scales + floats) / original, which must not exceed 1.1;
 * counting elements, a packed byte as the four codes it holds.
 */
import type { AuditReport } from '../../schemas/generated/audit-report.ts';
import { contract } from '../contract.ts';

/** Gate 1's floor and gate 2's ceiling, from schemas/contract.json. */
export function gateThresholds(): { ternaryFractionMin: number; storedRatioMax: number } {
  const g = contract().gates;
  return { ternaryFractionMin: g.ternary_fraction_min, storedRatioMax: g.stored_ratio_max };
}

/** One tensor of the audited set as counted from the stored bytes. */
export interface CountedTensor {
  name: string;
  /** Elements of the source tensor (0 for a stored tensor the source lacks). */
  original: number;
  /** Ternary weights stored as codes (4 per packed byte). */
  codes: number;
  /** Scale elements. */
  scales: number;
  /** Elements stored in float (a tensor the source lacks counts wholly here). */
  floats: number;
}

/**
 * The gate figures: audit.json's `counts` (schemas/audit-report.schema.json) without the manifest-level tallies
 * the audit adds around them. Margins are positive while there is room left; `float_headroom` is the float
 * elements that could still be added before gate 1 fails (negative: how many too many).
 */
export type GateFigures = Omit<AuditReport['counts'], 'manifest_tensors' | 'exempt_tensors' | 'excluded' | 'source_text_tensors'>;

export function computeGates(rows: readonly CountedTensor[]): GateFigures {
  const { ternaryFractionMin: TERNARY_FRACTION_MIN, storedRatioMax: STORED_RATIO_MAX } = gateThresholds();
  let original = 0;
  let codes = 0;
  let scales = 0;
  let floats = 0;
  for (const r of rows) {
    original += r.original;
    codes += r.codes;
    scales += r.scales;
    floats += r.floats;
  }
  const stored = codes + scales + floats;
  const fraction = stored === 0 ? 0 : codes / stored;
  const ratio = original === 0 ? (stored === 0 ? 0 : Infinity) : stored / original;
  return {
    tensors: rows.length,
    original,
    codes,
    scales,
    floats,
    stored,
    ternary_fraction: fraction,
    stored_ratio: ratio,
    ternary_fraction_pass: fraction > TERNARY_FRACTION_MIN,
    stored_ratio_pass: stored <= STORED_RATIO_MAX * original,
    ternary_fraction_margin: fraction - TERNARY_FRACTION_MIN,
    stored_ratio_margin: STORED_RATIO_MAX - ratio,
    float_headroom: Math.floor(codes / TERNARY_FRACTION_MIN - stored),
  };
}
