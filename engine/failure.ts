/**
 * Every expected failure of the engine and the stages, as one union keyed by a kebab-case `reason`.
 * Each variant carries the facts a user needs to act: which stage, which path, expected and actual.
 * Stages add their own variants here (one line of doc each) rather than throwing strings.
 */
export type Failure =
  /** `tsx pipeline.ts <name>` named no declared stage. */
  | { reason: 'unknown-stage'; stage: string; known: string[] }
  /** `--profile <name>` has no `profiles/<name>.json`. */
  | { reason: 'unknown-profile'; profile: string; known: string[] }
  /** The declared edges form a cycle. */
  | { reason: 'cycle'; path: string[] }
  /** A stage declared an input file that does not exist. */
  | { reason: 'missing-input'; stage: string; path: string }
  /** A JSON file (profile, lock, record, manifest) failed its schema. */
  | { reason: 'invalid-json'; path: string; errors: string[] }
  /** Another live process holds the workspace lock. */
  | { reason: 'workspace-locked'; lockPath: string; ownerPid: number; ownerCommand: string; since: string }
  /** A Python worker exited non-zero (or was killed). */
  | { reason: 'worker-failed'; stage: string; command: string; exitCode: number | null; signal: string | null; stderrTail: string }
  /** A stage was asked to run but is not implemented yet (a later issue fills it in). */
  | { reason: 'not-implemented'; stage: string; detail: string }
  /** A stage ran and failed for a domain reason it describes itself. */
  | { reason: 'stage-failed'; stage: string; detail: string; facts?: Record<string, unknown> }
  /** The user interrupted the run (SIGINT/SIGTERM). */
  | { reason: 'interrupted'; stage: string }
  /** Anything thrown inside a stage: a bug, reported with its stack. */
  | { reason: 'unknown-error-thrown'; stage: string; message: string; stack?: string };

export type FailureReason = Failure['reason'];
