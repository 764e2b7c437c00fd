/* Generated from schemas/engine/system-python-probe.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * <workdir>/.ternforge/cache/system-python.json: the system Python's version line (a fact in python-env's key) with what it was probed under; used only while the fingerprint and the interpreter's files are unchanged (stages/system-python.ts).
 */
export interface SystemPythonProbe {
  schema: 1;
  /**
   * JSON of what decides which interpreter the command starts: PATH, the command found on it and its stat identity, behind pyenv's shim pyenv's version selection.
   */
  fingerprint: string;
  /**
   * sys.version's words joined by one space.
   */
  version: string;
  /**
   * realpath of the probed interpreter's sys.executable.
   */
  executable: string;
  /**
   * Its stat identity (dev:ino:size:mtimeNs:ctimeNs).
   */
  executableId: string;
  /**
   * Its libpython when built shared, else null.
   */
  lib: string | null;
  /**
   * The stat identity of lib.
   */
  libId: string | null;
}
