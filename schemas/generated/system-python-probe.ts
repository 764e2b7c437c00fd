/* Generated from schemas/engine/system-python-probe.schema.json by scripts/gen-types.ts. Do not edit. */

/**
 * <workdir>/.ternforge/cache/system-python.json: the system Python's version line (a fact in python-env's key) per fingerprint of what it was probed under (PATH differs between `npm run` and a plain shell, for one); an entry is used only while its fingerprint and the interpreter's files are unchanged (stages/system-python.ts).
 */
export interface SystemPythonProbe {
  schema: 2;
  /**
   * Fingerprint (JSON of PATH, the command found on it and its stat identity, behind pyenv's shim pyenv's version selection) -> what the probe found; the most recent few are kept.
   */
  entries: {
    [k: string]: {
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
      /**
       * When it was probed (ISO 8601): the oldest entry goes first.
       */
      probedAt: string;
    };
  };
}
