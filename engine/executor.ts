/**
 * Runs stages in topological order. Per stage: evaluate its key; fresh -> skip; a run-cache hit ->
 * restore (re-point the outputs link); otherwise run it into a fresh temp dir, hash the result, move
 * it into the content-addressed store, point the link, write the evidence record, and write the lock
 * entry LAST. A failed or interrupted stage leaves the previous outputs, record and lock untouched.
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { arch, availableParallelism, homedir, platform, tmpdir } from 'node:os';
import { join } from 'node:path';
import type { EvidenceRecord } from '../schemas/generated/evidence-record.ts';
import type { OutputListing } from '../schemas/generated/output-listing.ts';
import type { OutputDigest } from './digest.ts';
import type { Failure } from './failure.ts';
import type { StaleReason } from './key.ts';
import { err, ok, type Result } from './result.ts';
import type { Evaluation, Session } from './session.ts';
import { lockPending } from './pin-resolve.ts';
import { commitToStore, listingDigest, listOutputs, pointOutputs, writeEvidence } from './store.ts';
import type { StageContext, StageOutcome } from './types.ts';
import { withPlaceholders } from './host-paths.ts';
import { runWorker } from './worker.ts';

/** What happened to one stage. */
export interface StageReport {
  stage: string;
  action: 'fresh' | 'ran' | 'restored' | 'failed' | 'would-run' | 'would-restore';
  reasons: StaleReason[];
  /** Milliseconds spent inside the stage's own `run`. */
  stageMs: number;
}

export interface RunOptions {
  stages: readonly string[];
  forced: ReadonlySet<string>;
  dryRun: boolean;
  signal: AbortSignal;
  /** A human line on stderr. */
  note(line: string): void;
}

export interface RunResult {
  reports: StageReport[];
  failure: Failure | null;
}

export async function runStages(s: Session, o: RunOptions): Promise<RunResult> {
  const reports: StageReport[] = [];
  const digests = new Map<string, OutputDigest>();
  const wouldChange = new Set<string>();
  for (const stage of o.stages) {
    if (o.signal.aborted) return { reports, failure: { reason: 'interrupted', stage } };
    const upstream: Record<string, OutputDigest> = {};
    for (const up of s.graph.needs.get(stage)!) upstream[up] = digests.get(up)!;
    const staleUp = o.dryRun ? s.graph.needs.get(stage)!.filter((u) => wouldChange.has(u)) : [];
    // The first stage with pins not in the lock yet resolves those of every stage left in this run (its
    // upstream, e.g. the workers' venv, is ready by now): all unresolvable sources in one error.
    if (!o.dryRun && s.pinLock.pending(stage, s.pinRequests(stage)).length > 0) {
      const locked = await lockPending(s, o.stages.slice(o.stages.indexOf(stage)), false, o.signal, o.note);
      if (!locked.ok) return { reports, failure: locked.error };
    }
    const evaluated = await s.evaluate(stage, upstream, staleUp, o.forced.has(stage));
    if (!evaluated.ok) return { reports, failure: evaluated.error };
    const ev = evaluated.value;
    if (ev.fresh) {
      digests.set(stage, ev.outputDigest!);
      reports.push({ stage, action: 'fresh', reasons: [], stageMs: 0 });
      o.note(`fresh     ${stage}`);
      continue;
    }
    const cacheable = s.mode(stage) === 'content' && !o.forced.has(stage);
    const hit = cacheable && staleUp.length === 0 ? await s.runCache.lookup(stage, ev.key, s.hasher) : null;
    if (o.dryRun) {
      wouldChange.add(stage);
      digests.set(stage, hit?.outputDigest as OutputDigest ?? ev.outputDigest ?? (ev.key as string as OutputDigest));
      reports.push({ stage, action: hit !== null ? 'would-restore' : 'would-run', reasons: ev.reasons, stageMs: 0 });
      continue;
    }
    if (hit !== null) {
      pointOutputs(s.ws, s.profile.name, stage, s.ws.storeDir(stage, hit.outputDigest));
      writeEvidence(s.ws, s.profile.name, stage, restoredRecord(hit.record as EvidenceRecord, s.profile.name));
      s.lock.set(stage, { key: ev.key, keyData: ev.keyData as EvidenceRecord['keyData'], outputDigest: hit.outputDigest, outputMode: 'content' });
      digests.set(stage, hit.outputDigest as OutputDigest);
      reports.push({ stage, action: 'restored', reasons: ev.reasons, stageMs: 0 });
      o.note(`restored  ${stage} (from the run cache)`);
      continue;
    }
    o.note(`running   ${stage}`);
    const ran = await runOne(s, ev, o);
    if (!ran.ok) {
      reports.push({ stage, action: 'failed', reasons: ev.reasons, stageMs: ran.error.stageMs });
      return { reports, failure: ran.error.failure };
    }
    digests.set(stage, ran.value.digest);
    reports.push({ stage, action: 'ran', reasons: ev.reasons, stageMs: ran.value.stageMs });
    o.note(`ran       ${stage} (${(ran.value.stageMs / 1000).toFixed(2)} s)`);
  }
  return { reports, failure: null };
}

/**
 * The record a run-cache hit leaves in this profile: the producing run's record (same key, same bytes),
 * naming this profile, with the profile that ran it and when it was restored. A record restored twice
 * keeps the profile that really ran it.
 */
export function restoredRecord(cached: EvidenceRecord, profile: string): EvidenceRecord {
  const ranIn = cached.restoredFrom?.profile ?? cached.profile;
  return { ...cached, profile, restoredFrom: { profile: ranIn, restoredAt: new Date().toISOString() } };
}

type RunOne = Result<{ digest: OutputDigest; stageMs: number }, { failure: Failure; stageMs: number }>;

async function runOne(s: Session, ev: Evaluation, o: RunOptions): Promise<RunOne> {
  const stage = ev.stage;
  const def = s.def(stage);
  const mode = s.mode(stage);
  mkdirSync(s.ws.tmpDir, { recursive: true });
  const out = mode === 'in-place' ? s.inPlaceDir(stage) : mkdtempSync(join(s.ws.tmpDir, `${stage}-`));
  if (mode === 'in-place') mkdirSync(out, { recursive: true });
  const discard = (): void => {
    if (mode !== 'in-place') rmSync(out, { recursive: true, force: true });
  };
  const log: string[] = [];
  const startedAt = new Date().toISOString();
  const ctx: StageContext<unknown> = {
    stage,
    profile: s.profile.name,
    params: s.profile.sections[stage],
    root: s.root,
    workdir: s.workdir,
    out,
    key: ev.key,
    upstream: (name) => {
      if (!s.graph.needs.get(stage)!.includes(name)) throw new Error(`stage ${stage} asked for the outputs of ${name}, which it does not declare in needs`);
      return s.upstreamDir(name);
    },
    python: s.python,
    worker: (command, config, launcher) => runWorker({ stage, python: s.python, root: s.root, tmpDir: s.ws.tmpDir, signal: o.signal, log: ctx.log }, command, config, launcher),
    log: (line) => {
      log.push(line);
      o.note(`[${stage}] ${line}`);
    },
    signal: o.signal,
    pins: s.standingPins(stage),
  };
  const t0 = performance.now();
  let outcome: Result<StageOutcome, Failure>;
  // One listener per stage, removed when the stage ends (a whole run of stages must not pile them up).
  let onAbort = (): void => {};
  const aborted = new Promise<Result<StageOutcome, Failure>>((resolve) => {
    onAbort = () => resolve(err({ reason: 'interrupted', stage }));
    if (o.signal.aborted) onAbort();
    o.signal.addEventListener('abort', onAbort, { once: true });
  });
  try {
    outcome = await Promise.race([def.run(ctx), aborted]);
  } catch (e) {
    outcome = err({ reason: 'unknown-error-thrown', stage, message: e instanceof Error ? e.message : String(e), stack: e instanceof Error ? e.stack : undefined });
  } finally {
    o.signal.removeEventListener('abort', onAbort);
  }
  const stageMs = performance.now() - t0;
  if (!outcome.ok || o.signal.aborted) {
    discard();
    return err({ failure: outcome.ok ? { reason: 'interrupted', stage } : outcome.error, stageMs });
  }
  let listing: OutputListing;
  let digest: OutputDigest;
  if (mode === 'in-place') {
    const d = await s.inPlaceDigest(stage, ev.key);
    if (d === null) return err({ failure: { reason: 'missing-marker', stage, marker: def.marker ?? '(none declared)', dir: out }, stageMs });
    digest = d;
    listing = def.marker === undefined ? [] : [{ path: def.marker, sha256: d, size: (await s.hasher.hash(join(out, def.marker))).size }];
  } else {
    const listed = await listOutputs(stage, out, s.hasher);
    if (!listed.ok) {
      discard();
      return err({ failure: listed.error, stageMs });
    }
    listing = listed.value;
    digest = listingDigest(listing);
  }
  setEvidenceRoots(s.root, s.ws.workdir, s.venv);
  const record: EvidenceRecord = {
    schema: 1,
    stage,
    profile: s.profile.name,
    key: ev.key,
    keyData: ev.keyData as EvidenceRecord['keyData'],
    command: process.argv.map(hostFree),
    outputMode: mode,
    outputDigest: digest,
    outputs: listing,
    startedAt,
    endedAt: new Date().toISOString(),
    host: { os: `${platform()}`, arch: arch(), cpus: availableParallelism(), node: process.version },
    log: log.map(hostFree),
    summary: scrubHostPaths(outcome.value.summary ?? {}) as EvidenceRecord['summary'],
  };
  if (mode !== 'in-place') {
    const dest = await commitToStore(s.ws, stage, out, digest, s.hasher);
    if (mode === 'content') s.runCache.write({ schema: 1, stage, key: ev.key, outputDigest: digest, listing, record });
    pointOutputs(s.ws, s.profile.name, stage, dest);
  }
  writeEvidence(s.ws, s.profile.name, stage, record);
  // Last: the lock entry that says these outputs are current.
  s.lock.set(stage, { key: ev.key, keyData: record.keyData, outputDigest: digest, outputMode: mode });
  return ok({ digest, stageMs });
}

/**
 * An evidence record holds no path of the build machine: the repository becomes `.`, the workdir
 * `<workdir>`, the Python venv `<venv>`, the home directory `~`, the temp directory `<tmp>`, and the node
 * binary its name. Two
 * builds on two machines then differ only where their work did. (keyData is left as computed: freshness
 * compares it.)
 */
let hostPrefixes: Array<[string, string]> | null = null;
export function setEvidenceRoots(root: string, workdir: string, venv?: string): void {
  hostPrefixes = [[workdir, '<workdir>'], [root, '.'], ...(venv !== undefined ? [[venv, '<venv>']] : []), [homedir(), '~'], [tmpdir(), '<tmp>']]
    .filter(([p]) => p.length > 1)
    .sort((a, b) => b[0].length - a[0].length) as Array<[string, string]>;
}

export function hostFree(text: string): string {
  if (text === process.execPath) return 'node';
  return withPlaceholders(text, hostPrefixes ?? []);
}

export function scrubHostPaths(value: unknown): unknown {
  if (typeof value === 'string') return hostFree(value);
  if (Array.isArray(value)) return value.map(scrubHostPaths);
  if (value !== null && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, scrubHostPaths(v)]));
  return value;
}
