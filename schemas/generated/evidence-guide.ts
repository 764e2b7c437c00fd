/* Generated from schemas/evidence-guide.schema.json by scripts/gen-types.ts. Do not edit. */

export type Sha256Hex = string;

/**
 * evidence/guide.json, written by the report stage: for each reviewer rule (DESIGN.md section 2) the claim, the cited file lines (found by anchor at generation time), the checks computed from the evidence and the re-check commands; the provenance proof; the record chain. evidence/README.md renders it.
 */
export interface EvidenceGuide {
  format: 'ternforge-guide/1';
  profile: string;
  /**
   * @minItems 6
   * @maxItems 6
   */
  rules: [Rule, Rule, Rule, Rule, Rule, Rule];
  provenance: {
    passed: boolean;
    dataManifest: 'present' | 'placeholder';
    sources: {
      name: string;
      dataset: string;
      config?: string | null;
      split: string;
      role: string;
      file?: string;
      /**
       * The benchmark family the source matches, if any.
       */
      benchmark: string | null;
      /**
       * A validation/test/dev split.
       */
      heldSplit: boolean;
    }[];
    /**
     * emit and every stage it transitively needs.
     */
    submissionAncestry: string[];
    /**
     * Direct readers of fetch-calib's outputs.
     */
    dataReaders: string[];
    steps: ProofStep[];
    violations: {
      source: string;
      rule:
        | 'unknown-role'
        | 'benchmark-not-evaluation'
        | 'held-split-not-evaluation'
        | 'evaluation-reaches-submission'
        | 'malformed-manifest';
      detail: string;
    }[];
  };
  chain: {
    stage: string;
    key: Sha256Hex;
    outputDigest: Sha256Hex;
    outputMode: 'content' | 'uncached' | 'in-place';
    placeholder: boolean;
    upstream: {
      [k: string]: Sha256Hex;
    };
  }[];
  placeholders: string[];
}
export interface Rule {
  id:
    | 'pinned-start'
    | 'text-only'
    | 'no-benchmark-data'
    | 'served-equals-audited'
    | 'ternary-execution'
    | 'no-outside-apis';
  title: string;
  claim: string;
  citations: Citation[];
  checks: Check[];
  commands: string[];
}
export interface Citation {
  /**
   * Path relative to the submission root.
   */
  file: string;
  /**
   * 1-based line that contains the anchor.
   */
  line: number;
  /**
   * The text searched for; the cited line contains it.
   */
  anchor: string;
  /**
   * The cited line, trimmed.
   */
  text: string;
  why: string;
}
export interface Check {
  check: string;
  /**
   * null: the evidence is not there (a placeholder stage); never invented.
   */
  passed: boolean | null;
  detail: string;
}
export interface ProofStep {
  id: 'classification' | 'reach' | 'defaults';
  claim: string;
  passed: boolean;
  facts: string[];
}
