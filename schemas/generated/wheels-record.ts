/* Generated from schemas/wheels-record.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * wheels.json, written by vendor-wheels and shipped in evidence/: every wheel serve.sh installs offline, its sha256, the target it was resolved for and the proof that an offline install resolves. Deterministic for the same resolution (no timings, no paths of this machine).
 */
export interface WheelsRecord {
  /**
   * Version of this layout.
   */
  format: 'ternforge-wheels/1';
  /**
   * The platform the wheels are for; the resolver evaluated markers for it, not for the machine that ran it.
   */
  target: {
    python_version: string;
    /**
     * uv's spelling, e.g. x86_64-manylinux_2_28.
     */
    platform: string;
    implementation: 'cp';
    /**
     * e.g. cp312.
     */
    abi: string;
  };
  /**
   * What was asked for: the pinned serving requirements and the profile's overrides.
   */
  requirements: {
    /**
     * Repository-relative path of the requirements file.
     */
    path: string;
    sha256: string;
    /**
     * The requirement lines resolved, overrides applied.
     */
    lines: string[];
    /**
     * Each replacement made, `old -> new`.
     */
    overrides: string[];
  };
  resolver: {
    tool: 'uv';
    version: string;
  };
  /**
   * The locked requirements written beside wheels/ (shipped as requirements-serve.txt).
   */
  lock: {
    file: string;
    sha256: string;
  };
  /**
   * Every file in wheels/, sorted by name.
   */
  wheels: {
    /**
     * Normalised project name.
     */
    name: string;
    /**
     * Exact version, with any local label (2.13.0+cpu).
     */
    version: string;
    filename: string;
    sha256: string;
    size: number;
  }[];
  /**
   * Bytes of all wheels.
   */
  total_size: number;
  /**
   * The CUDA runtime the wheels carry (the nvidia-cuda-runtime wheel torch loads) and the oldest NVIDIA driver that runs it; null for a CPU stack.
   */
  cuda: null | {
    /**
     * e.g. nvidia-cuda-runtime-cu12.
     */
    runtime_package: string;
    /**
     * Its version, e.g. 12.8.90.
     */
    runtime: string;
    major: number;
    minor: number;
    /**
     * torch's version in the set.
     */
    torch: string | null;
    /**
     * Oldest Linux driver that runs this runtime (CUDA minor-version compatibility).
     */
    min_driver: string;
    /**
     * The driver this major.minor toolkit was released with (not required: min_driver suffices).
     */
    toolkit_driver: string | null;
    /**
     * Where the driver figures come from.
     */
    source: string;
  };
  /**
   * The offline-install proof vendor-wheels ran before it succeeded.
   */
  proof: {
    passed: boolean;
    checks: {
      /**
       * record: files equal the lock; resolver: uv resolves the requirements offline from wheels/ for the target; installer: pip --dry-run --no-index installs the lock.
       */
      check: 'record' | 'resolver' | 'installer';
      status: 'passed' | 'failed' | 'skipped';
      /**
       * Why it was skipped.
       */
      detail?: string;
    }[];
  };
}
