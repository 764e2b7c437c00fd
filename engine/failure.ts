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
  /** A `--set` that is not `stage.key[.key...]=value` or names no stage. */
  | { reason: 'invalid-override'; text: string; detail: string }
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
  /** A stage ran and failed for a domain reason it describes itself. */
  | { reason: 'stage-failed'; stage: string; detail: string; facts?: Record<string, unknown> }
  /** The user interrupted the run (SIGINT/SIGTERM). */
  | { reason: 'interrupted'; stage: string }
  /** A question set broke a rule its schema cannot state (answer letter beyond the options, duplicate id). */
  | { reason: 'eval-question-invalid'; path: string; id: string; detail: string }
  /** A sweep (choosing a default) was given a question set whose role is not `selection`. */
  | { reason: 'eval-role-refused'; path: string; set: string; role: string; allowed: string[] }
  /** A sweep was configured with no values, a repeated value, or no sets. */
  | { reason: 'sweep-invalid'; parameter: string; detail: string }
  /** A stage's declared code file or directory does not exist. */
  | { reason: 'missing-code'; stage: string; path: string }
  /** The pipeline declaration is inconsistent (a `needs` or link naming no stage, a duplicate stage). */
  | { reason: 'invalid-pipeline'; detail: string }
  /** A stage left something in its outputs that is neither a file nor a directory. */
  | { reason: 'unsupported-output'; stage: string; path: string; kind: string }
  /** The report's provenance proof found data that breaks the rules (benchmark data or a held-out split outside `evaluation`, evaluation data reaching the submission). */
  | { reason: 'provenance-violation'; stage: string; manifest: string; violations: Array<{ source: string; rule: string; detail: string }> }
  /** The report cannot back a claim with the shipped files: a record is missing or does not chain, a cited anchor is gone, or a rule's check is contradicted. */
  | { reason: 'evidence-unverifiable'; stage: string; detail: string; items: string[] }
  /** Pinned sources cannot be resolved (no such repository, ref or file; offline): every one of the run's stages, listed together. */
  | { reason: 'unresolvable-pins'; lockPath: string; sources: Array<{ stage: string; name: string; repo: string; ref: string; error: string }> }
  /** Anything thrown inside a stage: a bug, reported with its stack. */
  | { reason: 'unknown-error-thrown'; stage: string; message: string; stack?: string };

export type FailureReason = Failure['reason'];
