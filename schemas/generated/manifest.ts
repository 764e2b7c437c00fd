/* Generated from schemas/manifest.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * quantization_manifest.json of a submission: every text-model tensor of the source, how it is stored and where. Written by pack, verified by audit, the only map the server loads from.
 */
export interface QuantizationManifest {
  /**
   * Version of this layout.
   */
  format: 'ternforge-manifest/1';
  /**
   * Source checkpoint id; the reviewer checks it is the pinned one.
   */
  base_model: string;
  /**
   * Pinned source revision.
   */
  revision: string;
  /**
   * Quantization method recorded by quantize.
   */
  method: string;
  /**
   * The packing convention, spelled out so a reader needs no code to decode the shards.
   */
  packing: {
    codes: 'c = t + 1 in {0,1,2}; 3 is invalid';
    code_dtype: 'U8';
    scale_dtype: 'F32';
    layout: 'four codes per byte, least significant bits first, row-major: byte = c0 | c1<<2 | c2<<4 | c3<<6; codes tensor [out, in/4]';
    formula: 'W[o, i] = (c[o, i] - 1) * scale[o, floor(i / group_size)]';
  };
  /**
   * Every weights file, with the size and sha256 the server and audit check.
   *
   * @minItems 1
   */
  shards: [
    {
      /**
       * Path relative to the submission root.
       */
      file: string;
      size: number;
      sha256: string;
    },
    ...{
      /**
       * Path relative to the submission root.
       */
      file: string;
      size: number;
      sha256: string;
    }[]
  ];
  /**
   * By source tensor name.
   */
  tensors: {
    [k: string]: ManifestTensor;
  };
}
export interface ManifestTensor {
  encoding: 'packed_2bit' | 'float';
  /**
   * Logical (source) shape.
   */
  shape: number[];
  /**
   * Source dtype; float tensors are stored in it.
   */
  dtype: string;
  /**
   * packed_2bit only: weights per scale along `in`.
   */
  group_size?: number;
  /**
   * One of shards[].file.
   */
  shard: string;
  /**
   * packed_2bit: U8 tensor [out, in/4] in the shard.
   */
  codes_key?: string;
  /**
   * packed_2bit: F32 tensor [out, in/group_size] in the shard.
   */
  scale_key?: string;
  /**
   * float: the tensor's data in the shard.
   */
  data_key?: string;
  /**
   * Names that share this tensor's storage (a tied output head); stored once.
   */
  tied_to?: string[];
  /**
   * Vision tower or MTP: stored for completeness, never loaded by the server.
   */
  exempt?: boolean;
}
