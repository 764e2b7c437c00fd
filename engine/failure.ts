/**
 * Every expected failure the engine itself knows, as one union keyed by a kebab-case `reason`.
 * Each variant carries the facts a user needs to act: which stage, which path, expected and actual.
 * A stage's own failures (a tensor pack refuses, a gate the audit fails, a worker's refusal) are not
 * here: they are lib/failures.ts's StageFailure, which reaches the engine as one `stage-failed`.
 */
export type Failure =
  /** `tsx pipeline.ts <name>` named no declared stage. */
  | { reason: 'unknown-stage'; stage: string; known: string[] }
  /** `--profile <name>` has no `profiles/<name>.json`. */
  | { reason: 'unknown-profile'; profile: string; known: string[] }
  /** A `--set` that is not `stage.key[.key...]=value` or names no stage. */
  | { reason: 'invalid-override'; text: string; detail: string; /** Well-formed, but the stage's schema refuses the value. */ offSchema?: true }
  /** An environment variable the engine reads has a value it does not accept (or one it cannot honour here). */
  | { reason: 'invalid-environment'; variable: string; detail: string }
  /** The declared edges form a cycle. */
  | { reason: 'cycle'; path: string[] }
  /** A stage declared an input file that does not exist. */
  | { reason: 'missing-input'; stage: string; path: string }
  /** A JSON file (profile, lock, record, manifest) failed its schema. */
  | { reason: 'invalid-json'; path: string; errors: string[] }
  /** Another live process holds the workspace lock. */
  | { reason: 'workspace-locked'; lockPath: string; ownerPid: number; ownerCommand: string; since: string; /** Set when the lock is another host's. */ ownerHost?: string }
  /** A Python worker exited non-zero (or was killed). */
  | { reason: 'worker-failed'; stage: string; command: string; exitCode: number | null; signal: string | null; stderrTail: string }
  /** A stage was asked to run but is not implemented yet (a later issue fills it in). */
  | { reason: 'not-implemented'; stage: string; detail: string }
  /** A stage ran and failed for a reason of its own domain: `failure` as data (for --json), `message` as text. */
  | { reason: 'stage-failed'; stage: string; failure: { readonly reason: string }; message: string }
  /** An in-place stage finished without writing its marker file. */
  | { reason: 'missing-marker'; stage: string; marker: string; dir: string }
  /** The user interrupted the run (SIGINT/SIGTERM). */
  | { reason: 'interrupted'; stage: string }
  /** A stage's declared code file or directory does not exist. */
  | { reason: 'missing-code'; stage: string; path: string }
  /** The pipeline declaration is inconsistent (a `needs` or link naming no stage, a duplicate stage). */
  | { reason: 'invalid-pipeline'; detail: string }
  /** A stage left something in its outputs that is neither a file nor a directory. */
  | { reason: 'unsupported-output'; stage: string; path: string; kind: string }
  /** Pinned sources cannot be resolved (no such repository, ref or file; offline): every one of the run's stages, listed together. */
  | { reason: 'unresolvable-pins'; lockPath: string; sources: Array<{ stage: string; name: string; repo: string; ref: string; error: string }> }
  /** Anything thrown inside a stage: a bug, reported with its stack. */
  | { reason: 'unknown-error-thrown'; stage: string; message: string; stack?: string };

export type FailureReason = Failure['reason'];
