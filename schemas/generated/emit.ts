/* Generated from schemas/stages/emit.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * The profile section of the emit stage.
 */
export interface EmitParams {
  /**
   * Also publish the emitted directory as a hard-link tree at publish_dir (default true).
   */
  publish?: boolean;
  /**
   * Where to publish, relative to the workdir (default dist/<profile>).
   */
  publish_dir?: string;
}
