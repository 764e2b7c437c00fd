import type { JsonValue } from './digest.ts';
import type { Failure } from './failure.ts';
import type { LockedSource, PinRequest } from './pin-lock.ts';
import type { Result } from './result.ts';

/** Tool versions a stage may depend on; their values enter the stage key. */
export type Tool = 'node' | 'python' | 'torch';

/**
 * How the engine treats a stage's outputs.
 * - `content`: written to a temp dir, renamed into a content-addressed store, kept in the run cache.
 * - `uncached`: written to a temp dir and renamed into place, but never restored from the run cache
 *   (for stages whose inputs are not fully declared, e.g. ones that measure a live server).
 * - `in-place`: built where it lives, under the workspace lock (the Python virtual environment: a venv
 *   cannot be moved once built). Never in the run cache.
 */
export type OutputMode = 'content' | 'uncached' | 'in-place';

/** What a stage's `run` receives. Everything a stage reads or writes goes through here. */
export interface StageContext<P> {
  /** The stage's own name. */
  readonly stage: string;
  /** The selected profile's name (`tiny`, `smol`, `qwen3.5-4b`). */
  readonly profile: string;
  /** The stage's own section of the profile, validated against its schema. */
  readonly params: P;
  /** Repository root: code, profiles, schemas, python/. */
  readonly root: string;
  /** Workspace root: the directory holding `.ternforge/` (the repository root unless `--workdir`). */
  readonly workdir: string;
  /** An empty directory the stage writes all its outputs into (for `in-place`: the final directory). */
  readonly out: string;
  /** This run's stage key (sha256 of its StageKeyData); in-place stages record it to know they are done. */
  readonly key: string;
  /** The committed output directory of a direct upstream stage (read-only). */
  upstream(stage: string): string;
  /** The Python interpreter of the workers' virtual environment. */
  readonly python: string;
  /**
   * Run `python -m ternforge <command> --config <json file>` in the workers' environment.
   * Stdout carries JSON-lines events (returned in order, progress shown live), stderr carries logs
   * (kept in the stage log). A non-zero exit becomes `worker-failed` with the tail of stderr.
   * `launcher`: interpreter arguments before `-m ternforge` (a module that starts the worker, e.g.
   * `-m torch.distributed.run --nproc-per-node 2`); none: the worker itself.
   */
  worker(command: string, config: unknown, launcher?: readonly string[]): Promise<Result<WorkerEvent[], Failure>>;
  /** One line of the stage's log (shown, and kept in its evidence record). */
  log(line: string): void;
  /** Fires on SIGINT/SIGTERM; long stages check it. */
  readonly signal: AbortSignal;
  /**
   * A stage with `pins`: each requested source's entry in profiles/<profile>.lock.json (resolved before
   * the stage runs, part of its key); the stage reads exactly these commits and checks these hashes.
   * Empty for other stages.
   */
  readonly pins: Readonly<Record<string, LockedSource>>;
}

/** What a pin hook's `resolve` may use: the workers' Python, like a stage's run. */
export interface PinEnv {
  readonly stage: string;
  readonly root: string;
  readonly python: string;
  /** The lock file the result goes to, relative to the root (for messages). */
  readonly lockPath: string;
  worker(command: string, config: unknown): Promise<Result<WorkerEvent[], Failure>>;
  log(line: string): void;
}

/**
 * Named sources a stage reads by a ref that can move (a branch or tag of a hub repository). The engine
 * keeps what each resolved to in the committed lock `profiles/<profile>.lock.json` (engine/pin-lock.ts):
 * a request without a standing entry is resolved before the stage runs (or by `tsx pipeline.ts lock`),
 * and the entries enter the stage key.
 */
export interface PinHook<P> {
  /** The sources the params ask for; none (an empty list) leaves the stage's key as without the hook. */
  requests(params: P): PinRequest[];
  /**
   * Resolve requests (network): source name -> locked source. Every request is tried; the ones that
   * fail are returned together in one `unresolvable-pins` failure.
   */
  resolve(requests: readonly PinRequest[], env: PinEnv): Promise<Result<Record<string, LockedSource>, Failure>>;
}

/** One JSON-lines event a worker printed on stdout: `{"event": "...", ...}`. */
export interface WorkerEvent {
  event: string;
  [field: string]: unknown;
}

/** What a stage may report back besides its files: figures for its evidence record. */
export interface StageOutcome {
  /** Free-form figures (counts, metrics, timings) kept in the evidence record. */
  summary?: Record<string, unknown>;
}

/** A stage as declared in `stages/<name>.ts`. Edges are declared in `pipeline.ts`, not here. */
export interface StageDef<P = unknown> {
  /** kebab-case, equal to the file name in `stages/`. */
  readonly name: string;
  /** One line for `dag` and `--help`. */
  readonly summary: string;
  /** Repository-relative files or directories whose bytes enter the key (the stage's own code). */
  readonly code: readonly string[];
  /** Repository-relative path of the JSON Schema for this stage's profile section. */
  readonly schema: string;
  /** Declared input files outside the graph (absolute or repository-relative), given the params. */
  inputs?(params: P, root: string): string[];
  /**
   * The parameters that enter the key, given the stage's profile section (default: all of it): a stage
   * leaves out settings that cannot change its outputs (how many processes share the work, where they
   * meet), so runs differing only there share one key, one lock entry and one run-cache entry.
   */
  keyParams?(params: P): { [key: string]: JsonValue };
  /** Tool versions that enter the key. */
  readonly tools?: readonly Tool[];
  /**
   * Other facts about the environment that decide the outputs (e.g. the system Python's version for
   * python-env); each name -> value enters the key under `facts`. `cacheDir` (`<workdir>/.ternforge/cache`)
   * may keep a costly probe's answer across runs, for as long as the stage can tell it still holds.
   */
  facts?(params: P, root: string, cacheDir: string): Promise<Record<string, string>>;
  /**
   * The stage writes this profile's name, or this profile's evidence records, into its outputs (report):
   * the profile's name then enters the key as `facts.profile`, so its outputs are never restored from
   * another profile's run. Other stages' keys leave the profile out, and a hit across profiles is right.
   */
  readonly namesProfile?: boolean;
  /** See OutputMode. Default `content`. */
  readonly outputs?: OutputMode;
  /**
   * `in-place` stages only: the directory they build (default `.ternforge/<profile>/<stage>/outputs`),
   * given the workdir and the stage's profile section.
   */
  dir?(workdir: string, params: P): string;
  /**
   * `in-place` stages only: a file inside their directory, written last, whose bytes stand for the
   * outputs (its digest is the output digest; the stage is fresh only while it is unchanged).
   */
  readonly marker?: string;
  /** Only fetch stages may touch the network. */
  readonly network?: boolean;
  /** Sources the stage pins through the committed lock file (see PinHook). */
  readonly pins?: PinHook<P>;
  run(ctx: StageContext<P>): Promise<Result<StageOutcome, Failure>>;
}

/** Identity helper that keeps the params type. */
export function defineStage<P>(def: StageDef<P>): StageDef<P> {
  return def;
}

/** An edge list: each stage with the stages it needs. Declared in `pipeline.ts`. */
export interface PipelineDecl {
  stages: ReadonlyArray<{ stage: StageDef<any>; needs: readonly string[] }>;
  /**
   * Git-ignored symlinks at the workdir root pointing into the current profile's outputs, refreshed
   * after every run: link name -> `<stage>/<path inside its outputs>`, e.g. `{ weights: 'pack/weights' }`.
   */
  links?: Readonly<Record<string, string>>;
  /**
   * Hard-link mirrors of a stage's current outputs at a stable path, refreshed after every run:
   * destination (relative to the workdir, `{profile}` substituted) -> stage, e.g.
   * `{ 'dist/{profile}': 'report' }`. See engine/publish.ts.
   */
  publish?: Readonly<Record<string, string>>;
}
