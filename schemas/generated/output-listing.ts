/* Generated from schemas/engine/output-listing.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * A stage's outputs: every regular file under its output directory, sorted by relative path ('/' separated), with its sha256 and size. The sha256 of this list's canonical JSON is the output digest; a top-level evidence.json is left out of it.
 */
export type OutputListing = {
  path: string;
  sha256: string;
  size: number;
}[];
