/**
 * One invocation's view of a workspace: the graph, the profile, the lock, the hasher, and the
 * evaluation of each stage (its key, fresh or stale, and why). Shared by run, status and --dry-run.
 */
import { mkdirSync } from 'node:fs';
import { join, relative } from 'node:path';
import { sha256, type JsonValue, type OutputDigest, type StageKey } from './digest.ts';
import type { Failure } from './failure.ts';
import type { Graph } from './graph.ts';
import { FileHasher } from './hash.ts';
import { engineSchemaSet, SchemaSet } from './json-io.ts';
import { computeKeyData, diffKeys, stageKey, type StageKeyData, type StaleReason } from './key.ts';
import { ProfileLock, type LockEntry } from './lock-file.ts';
import { PinLock, type LockedSource, type PinRequest } from './pin-lock.ts';
import { loadProfile, type LoadedProfile } from './profile.ts';
import { mmapAddonForHashing } from './native/addon.ts';
import { err, ok, type Result } from './result.ts';
import { currentOutputs, RunCache, storeIntact, Workspace } from './store.ts';
import type { OutputMode, StageDef } from './types.ts';
import { toolVersions, venvDir, venvPython } from './venv.ts';
import { runWorker } from './worker.ts';

/** Stands in for the outputs of an upstream stage that never ran. */
export const ABSENT_DIGEST = sha256('ternforge: no outputs') as OutputDigest;

export interface SessionOptions {
  root: string;
  workdir: string;
  profile: string;
  graph: Graph;
  /** `--set stage.key=value` overrides of the profile's sections. */
  overrides?: readonly string[];
}

/** What evaluating one stage found. */
export interface Evaluation {
  stage: string;
  keyData: StageKeyData;
  key: StageKey;
  /** Empty when fresh. */
  reasons: StaleReason[];
  fresh: boolean;
  /** The digest of the stage's current outputs (the lock's), when there are any. */
  outputDigest: OutputDigest | null;
}

export class Session {
  readonly root: string;
  readonly workdir: string;
  readonly ws: Workspace;
  readonly graph: Graph;
  readonly profile: LoadedProfile;
  readonly schemas: SchemaSet;
  readonly hasher: FileHasher;
  readonly lock: ProfileLock;
  /** profiles/<profile>.lock.json: the committed lock of pinned sources. */
  readonly pinLock: PinLock;
  readonly runCache: RunCache;
  readonly venv: string;

  private constructor(o: SessionOptions, profile: LoadedProfile, schemas: SchemaSet, lock: ProfileLock, pinLock: PinLock, hashAddon: string | null) {
    this.root = o.root;
    this.workdir = o.workdir;
    this.ws = new Workspace(o.workdir);
    this.graph = o.graph;
    this.profile = profile;
    this.schemas = schemas;
    this.lock = lock;
    this.pinLock = pinLock;
    this.hasher = new FileHasher(this.ws.hashCache, schemas, { storeDir: this.ws.storeRoot, addon: hashAddon });
    this.runCache = new RunCache(this.ws, schemas);
    this.venv = venvDir(o.workdir, (profile.sections['python-env'] as { requirements?: string } | undefined)?.requirements);
  }

  static open(o: SessionOptions): Result<Session, Failure> {
    const ws = new Workspace(o.workdir);
    const schemas = engineSchemaSet(ws.schemaCache);
    const profile = loadProfile(o.root, o.profile, o.graph, new SchemaSet(join(o.root, 'schemas'), ws.schemaCache), o.overrides);
    if (!profile.ok) return profile;
    const lock = ProfileLock.read(ws.lockFile(o.profile), o.profile, schemas, o.workdir);
    if (!lock.ok) return lock;
    const pinLock = PinLock.read(o.root, o.profile, schemas);
    if (!pinLock.ok) return pinLock;
    const addon = mmapAddonForHashing();
    if (!addon.ok) return err({ reason: 'invalid-environment', variable: 'TERNFORGE_HASH_IO', detail: addon.error });
    return ok(new Session(o, profile.value, schemas, lock.value, pinLock.value, addon.value));
  }

  def(stage: string): StageDef<unknown> {
    return this.graph.defs.get(stage)!;
  }

  mode(stage: string): OutputMode {
    return this.def(stage).outputs ?? 'content';
  }

  /** Where an in-place stage builds (python-env: the venv). */
  inPlaceDir(stage: string): string {
    const def = this.def(stage);
    return def.dir?.(this.workdir, this.profile.sections[stage]) ?? this.ws.outputsLink(this.profile.name, stage);
  }

  /** The directory `ctx.upstream(stage)` returns. */
  upstreamDir(stage: string): string {
    return this.mode(stage) === 'in-place' ? this.inPlaceDir(stage) : this.ws.outputsLink(this.profile.name, stage);
  }

  /** The sources a stage pins under the current profile (none for a stage without the hook). */
  pinRequests(stage: string): PinRequest[] {
    return this.def(stage).pins?.requests(this.profile.sections[stage]) ?? [];
  }

  /** The stage's standing lock entries, by source name (requests without one are left out). */
  standingPins(stage: string): Record<string, LockedSource> {
    const out: Record<string, LockedSource> = {};
    for (const r of this.pinRequests(stage)) {
      const e = this.pinLock.standing(stage, r);
      if (e !== undefined) out[r.name] = e;
    }
    return out;
  }

  /**
   * Resolve pin requests through the stage's hook (network; the workers' Python): source name -> its
   * locked source. Nothing is written; `pinLock.update` records the result.
   */
  async resolvePins(stage: string, requests: readonly PinRequest[], signal: AbortSignal, log: (line: string) => void): Promise<Result<Record<string, LockedSource>, Failure>> {
    const hook = this.def(stage).pins;
    if (hook === undefined || requests.length === 0) return ok({});
    mkdirSync(this.ws.tmpDir, { recursive: true });
    return hook.resolve(requests, {
      stage,
      root: this.root,
      python: this.python,
      lockPath: relative(this.root, this.pinLock.path),
      worker: (command, config) => runWorker({ stage, python: this.python, root: this.root, tmpDir: this.ws.tmpDir, signal, log }, command, config),
      log,
    });
  }

  get python(): string {
    return venvPython(this.venv);
  }

  /** The output digest of an in-place stage: its marker file's digest (or one derived from the key). */
  async inPlaceDigest(stage: string, key: string): Promise<OutputDigest | null> {
    const marker = this.def(stage).marker;
    if (marker === undefined) return sha256(`in-place:${key}`) as OutputDigest;
    try {
      return (await this.hasher.hash(join(this.inPlaceDir(stage), marker))).sha256 as string as OutputDigest;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw e;
    }
  }

  /** Whether the outputs a lock entry names are in place and intact (no rehash thanks to the stat cache). */
  async outputsIntact(stage: string, entry: LockEntry): Promise<boolean> {
    if (this.mode(stage) === 'in-place') return (await this.inPlaceDigest(stage, entry.key)) === entry.outputDigest;
    const expected = this.ws.storeDir(stage, entry.outputDigest);
    if (currentOutputs(this.ws, this.profile.name, stage) !== expected) return false;
    return storeIntact(stage, expected, entry.outputDigest, this.hasher);
  }

  /**
   * Evaluate one stage given its upstream stages' current output digests and which of them are
   * themselves stale (they run first, so this stage's key may still change).
   */
  async evaluate(stage: string, upstream: Record<string, OutputDigest>, staleUpstream: readonly string[], forced: boolean): Promise<Result<Evaluation, Failure>> {
    const requests = this.pinRequests(stage);
    const keyData = await computeKeyData({
      def: this.def(stage),
      params: this.profile.sections[stage] as { [key: string]: JsonValue },
      profile: this.profile.name,
      root: this.root,
      cacheDir: this.ws.factsCache,
      hasher: this.hasher,
      upstream,
      toolVersions: toolVersions(this.venv, this.schemas),
      ...(requests.length > 0 ? { pins: this.standingPins(stage) } : {}),
    });
    if (!keyData.ok) return keyData;
    const key = stageKey(keyData.value);
    const entry = this.lock.get(stage);
    const reasons: StaleReason[] = [];
    if (forced) reasons.push({ kind: 'forced' });
    for (const r of this.pinLock.pending(stage, requests)) reasons.push({ kind: 'pin', source: r.name, change: 'unresolved' });
    if (entry === undefined) reasons.push({ kind: 'never-run' });
    else if (entry.key !== key) reasons.push(...diffKeys(entry.keyData, keyData.value));
    for (const up of staleUpstream) if (!reasons.some((r) => r.kind === 'upstream' && r.stage === up)) reasons.push({ kind: 'upstream', stage: up, change: 'stale' });
    if (entry !== undefined && entry.key === key && !(await this.outputsIntact(stage, entry))) reasons.push({ kind: 'output-missing' });
    // A key change that diffKeys cannot name (should not happen) still makes the stage stale.
    if (entry !== undefined && entry.key !== key && reasons.length === 0) reasons.push({ kind: 'engine', from: entry.keyData.format, to: keyData.value.format });
    return ok({
      stage,
      keyData: keyData.value,
      key,
      reasons,
      fresh: reasons.length === 0,
      outputDigest: entry === undefined ? null : (entry.outputDigest as OutputDigest),
    });
  }

  /**
   * Evaluate `stages` (topological order) as status sees them: nothing runs, so a stale stage's
   * downstream is judged against its current outputs and marked `upstream ... stale`.
   */
  async evaluateAll(stages: readonly string[], forced: ReadonlySet<string>): Promise<Result<Evaluation[], Failure>> {
    const done = new Map<string, Evaluation>();
    const out: Evaluation[] = [];
    for (const stage of stages) {
      const upstream: Record<string, OutputDigest> = {};
      const staleUp: string[] = [];
      for (const up of this.graph.needs.get(stage)!) {
        const ev = done.get(up);
        upstream[up] = ev?.outputDigest ?? this.lock.get(up)?.outputDigest as OutputDigest ?? ABSENT_DIGEST;
        if (ev !== undefined && !ev.fresh) staleUp.push(up);
      }
      const ev = await this.evaluate(stage, upstream, staleUp, forced.has(stage));
      if (!ev.ok) return ev;
      done.set(stage, ev.value);
      out.push(ev.value);
    }
    return ok(out);
  }

  async close(): Promise<void> {
    await this.hasher.close();
  }
}
