/* Generated from schemas/evidence-record.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * A stage's outputs: every regular file under its output directory, sorted by relative path ('/' separated), with its sha256 and size. The sha256 of this list's canonical JSON is the output digest; a top-level evidence.json is left out of it.
 */
export type OutputListing = {
  path: string;
  sha256: string;
  size: number;
}[];

/**
 * The record of the stage run that produced a stage's current outputs (.ternforge/<profile>/<stage>/evidence.json). Everything but startedAt, endedAt and host is reproducible.
 */
export interface EvidenceRecord {
  schema: 1;
  stage: string;
  profile: string;
  key: string;
  keyData: StageKeyData;
  /**
   * The exact command line (argv) of the run.
   */
  command: string[];
  outputMode: 'content' | 'uncached' | 'in-place';
  outputDigest: string;
  outputs: OutputListing;
  /**
   * ISO time (not reproducible).
   */
  startedAt: string;
  /**
   * ISO time (not reproducible).
   */
  endedAt: string;
  /**
   * Where it ran (not reproducible).
   */
  host: {
    os: string;
    arch: string;
    cpus: number;
    node: string;
  };
  /**
   * The stage's log lines (worker stderr included).
   */
  log: string[];
  /**
   * The stage's own figures (StageOutcome.summary).
   */
  summary: {};
}
/**
 * Code files and digests, params, input digests, upstream output digests and tool versions: the whole key.
 */
export interface StageKeyData {
  /**
   * Engine format version: bumped when the engine changes how it runs stages or lays out outputs, so every key changes with it.
   */
  format: number;
  /**
   * The stage name: two stages with the same code and params still have different keys.
   */
  stage: string;
  code: DigestMap;
  /**
   * The stage's own section of the profile, exactly as validated.
   */
  params: {
    [k: string]: unknown;
  };
  inputs: DigestMap1;
  upstream: DigestMap2;
  /**
   * Declared tool versions (node, python, torch); python and torch come from the venv's ternforge-env.json.
   */
  tools: {
    [k: string]: string;
  };
  /**
   * Other facts a stage declares about its environment (python-env: the system Python's version).
   */
  facts: {
    [k: string]: string;
  };
}
/**
 * The stage's own code: repository-relative file path -> sha256 of its bytes (directories expanded, __pycache__ ignored).
 */
export interface DigestMap {
  [k: string]: string;
}
/**
 * Declared input files outside the graph: path as declared -> sha256 of its bytes.
 */
export interface DigestMap1 {
  [k: string]: string;
}
/**
 * Each direct upstream stage -> the digest of its current output listing (not its key), so an upstream rerun with byte-identical outputs leaves this stage fresh (early cutoff).
 */
export interface DigestMap2 {
  [k: string]: string;
}
