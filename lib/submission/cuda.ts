/**
 * Which CUDA runtime a resolved wheel set carries and the oldest NVIDIA driver that runs it, for the
 * evidence (wheels.json `cuda`) and for the profile's `cuda_major` check in vendor-wheels.
 *
 * The runtime is the version of the `nvidia-cuda-runtime[-cuNN]` wheel torch depends on (PyPI's torch
 * builds load the CUDA libraries from those wheels, not from the machine). The driver figures are
 * NVIDIA's, from the CUDA Toolkit Release Notes (Table 2, "CUDA Toolkit and Minimum Required Driver Version
 * for CUDA Minor Version Compatibility", and Table 3, "CUDA Toolkit and Corresponding Driver Versions",
 * Linux x86_64): within a major version, an application built with any minor runs on the major's first
 * driver (minor-version compatibility); the toolkit's own release driver is recorded beside it.
 */
import type { WheelsRecord } from '../../schemas/generated/wheels-record.ts';
import type { WheelFile } from './wheels.ts';

/** The evidence record of a CUDA wheel set: wheels.json's `cuda` (schemas/wheels-record.schema.json). */
export type CudaRecord = NonNullable<WheelsRecord['cuda']>;

export const DRIVER_SOURCE =
  'NVIDIA CUDA Toolkit Release Notes, Table 2 (minimum driver for CUDA minor version compatibility, Linux x86_64) and Table 3 (toolkit and corresponding driver versions); https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/';

/** Minimum Linux x86_64 driver per CUDA major, by minor-version compatibility (Table 2). */
export const MIN_DRIVER_BY_MAJOR: Readonly<Record<number, string>> = {
  11: '450.80.02',
  12: '525.60.13',
  13: '580.65.06',
};

/** The GA release driver of each toolkit major.minor (Table 3, Linux x86_64). */
export const TOOLKIT_DRIVER: Readonly<Record<string, string>> = {
  '11.8': '520.61.05',
  '12.0': '525.60.13',
  '12.1': '530.30.02',
  '12.2': '535.54.03',
  '12.3': '545.23.06',
  '12.4': '550.54.14',
  '12.5': '555.42.02',
  '12.6': '560.28.03',
  '12.8': '570.26',
  '12.9': '575.51.03',
  '13.0': '580.65.06',
};

const RUNTIME = /^nvidia-cuda-runtime(?:-cu(\d+))?$/;

/**
 * The CUDA runtime of a wheel set, or null when it carries none (the CPU stack). Throws when the runtime's
 * major has no known minimum driver: a new major must be looked up, not guessed.
 */
export function cudaOf(wheels: readonly Pick<WheelFile, 'name' | 'version'>[]): CudaRecord | null {
  const rt = wheels.find((w) => RUNTIME.test(w.name));
  if (rt === undefined) return null;
  const [major, minor] = rt.version.split('.').map(Number) as [number, number];
  const suffix = RUNTIME.exec(rt.name)![1];
  if (suffix !== undefined && Number(suffix) !== major) throw new Error(`${rt.name}==${rt.version}: the version's major is not the package's cu${suffix}`);
  const minDriver = MIN_DRIVER_BY_MAJOR[major];
  if (minDriver === undefined) throw new Error(`${rt.name}==${rt.version}: no minimum driver known for CUDA ${major}; add it to MIN_DRIVER_BY_MAJOR from NVIDIA's release notes`);
  const torch = wheels.find((w) => w.name === 'torch');
  return {
    runtime_package: rt.name,
    runtime: rt.version,
    major,
    minor,
    torch: torch?.version ?? null,
    min_driver: minDriver,
    toolkit_driver: TOOLKIT_DRIVER[`${major}.${minor}`] ?? null,
    source: DRIVER_SOURCE,
  };
}
