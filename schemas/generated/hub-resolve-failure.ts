/* Generated from schemas/workers/hub-resolve-failure.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * The `failure` event of `python -m ternforge hub-resolve`: every request that did not resolve, each with the hub's error.
 */
export interface HubResolveFailure {
  event: 'failure';
  reason: 'unresolvable-sources';
  message: string;
  /**
   * @minItems 1
   */
  unresolvable: [
    {
      name: string;
      repo: string;
      ref: string;
      error: string;
    },
    ...{
      name: string;
      repo: string;
      ref: string;
      error: string;
    }[]
  ];
}
