/* Generated from schemas/stages/vendor-wheels.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * The profile section of the vendor-wheels stage: which requirements, for which target platform, from which sources.
 */
export interface VendorWheelsParams {
  /**
   * Repository-relative pinned serving requirements (default python/requirements-serve.txt, the CPU stack; qwen3.5-4b: python/requirements-serve-cuda.txt).
   */
  requirements?: string;
  /**
   * CPython minor version serve.sh will install for, e.g. 3.12 on the GPU box, 3.11 for the local CPU stack.
   */
  python_version: string;
  /**
   * Target platform in uv's spelling, e.g. x86_64-manylinux_2_28.
   */
  platform: string;
  /**
   * Exact pins that replace same-named lines of the requirements (e.g. torch==2.13.0+cpu for the local CPU stack).
   */
  overrides?: string[];
  /**
   * Extra local wheel directories the resolver and the download may use (e.g. /opt/wheels for the CPU torch build).
   */
  find_links?: string[];
  /**
   * Package index to resolve and download from (default: PyPI).
   */
  index_url?: string;
  /**
   * The CUDA major version the resolved set must carry (its nvidia-cuda-runtime wheel), e.g. 12 so that a driver R525-R575 runs it; the stage fails on any other (or a CPU-only set). Unset: not checked.
   */
  cuda_major?: number;
  /**
   * Repository-relative lock of the target CPython's headers (python/python-headers.json: a distribution package by URL, size and sha256 per CPython minor). Set: the headers of python_version are fetched, checked and extracted into toolchain/include/, and the submission ships them (with the ziglang wheel of the requirements, a C compiler for Triton on a box without one).
   */
  python_headers?: string;
  /**
   * Interpreter of the target's version that runs pip's offline dry-run install (default: the workers' Python when its version matches, else python<X.Y> on PATH).
   */
  proof_python?: string;
}
