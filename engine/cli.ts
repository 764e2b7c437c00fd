/**
 * The command line: `tsx pipeline.ts all | <stage>... | status [--why] [--json] | dag [--mermaid] | gc |
 * lock [--update] [stage...]`
 * with `--profile <name>` (default tiny), `--force`, `--dry-run`, `--wait`, `--workdir <dir>`, `--json`.
 * Exit codes: 0 ok; 1 stale (status) or failed; 2 usage errors (unknown stage or profile, a broken
 * pipeline declaration, bad options); 130 interrupted.
 */
import { Command, CommanderError } from 'commander';
import { rmSync } from 'node:fs';
import { resolve } from 'node:path';
import { dagMermaid, dagText } from './dag.ts';
import { runStages, type StageReport } from './executor.ts';
import type { Failure } from './failure.ts';
import { formatFailure } from './format-failure.ts';
import { collectGarbage } from './gc.ts';
import { buildGraph, upstreamClosure, type Graph } from './graph.ts';
import { formatReason } from './key.ts';
import { refreshLinks } from './links.ts';
import { refreshPublished } from './publish.ts';
import { engineSchemaSet } from './json-io.ts';
import { formatPinChange } from './pin-lock.ts';
import { lockPending } from './pin-resolve.ts';
import { knownProfiles } from './profile.ts';
import { Session } from './session.ts';
import { Workspace } from './store.ts';
import type { PipelineDecl } from './types.ts';
import { acquireWorkspaceLock, type HeldLock } from './workspace-lock.ts';

/** What an extra command gets besides its own arguments: the global options and a way to run stages first. */
export interface CommandContext {
  root: string;
  workdir: string;
  profile: string;
  /** `--set` overrides, as given. */
  overrides: string[];
  graph: Graph;
  /** Run these stages (and what they need) as `tsx pipeline.ts <stage>...` would, reporting on stderr; the exit code. */
  runStages(stages: readonly string[]): Promise<number>;
}

/** An extra subcommand a pipeline adds (the audit adds `verify <dir>`, the preflight `preflight`). */
export interface ExtraCommand {
  name: string;
  description: string;
  /** Commander argument syntax, e.g. `<dir>` or `[files...]`. */
  argument?: string;
  /** The command takes `--json`: commander reads `--json` anywhere as the global option, so it is passed on. */
  json?: boolean;
  run(args: string[], ctx: CommandContext): Promise<number>;
}

export interface CliOptions {
  /** Repository root: profiles/, schemas/, code paths are relative to it. */
  root: string;
  commands?: readonly ExtraCommand[];
  /** Arguments after the script (default: process.argv.slice(2)). */
  argv?: readonly string[];
}

interface GlobalOptions {
  profile: string;
  workdir?: string;
  json?: boolean;
  force?: boolean;
  dryRun?: boolean;
  wait?: boolean;
  set?: string[];
}

/** Failures that mean the command line or the declaration is wrong (exit 2), not the run. */
const USAGE_REASONS: ReadonlySet<Failure['reason']> = new Set(['unknown-stage', 'unknown-profile', 'invalid-override', 'invalid-environment', 'cycle', 'invalid-pipeline']);

function fail(f: Failure): number {
  process.stderr.write(`error: ${formatFailure(f)}\n`);
  return USAGE_REASONS.has(f.reason) ? 2 : 1;
}

function human(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = bytes / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v.toFixed(1)} ${units[i]}`;
}

export async function runCli(pipeline: PipelineDecl, options: CliOptions): Promise<number> {
  const t0 = performance.now();
  const root = resolve(options.root);
  const graphResult = buildGraph(pipeline);
  if (!graphResult.ok) return fail(graphResult.error);
  const graph = graphResult.value;
  let code = 0;

  const program = new Command('tsx pipeline.ts')
    .description('Run the ternforge pipeline: content-hashed stages, a run cache, evidence records.')
    .option('--profile <name>', `profile (profiles/<name>.json): ${knownProfiles(root).join(', ')}`, 'tiny')
    .option('--workdir <dir>', 'directory holding .ternforge/ (default: $TERNFORGE_WORKDIR, else the repository root)')
    .option('--json', 'machine-readable output on stdout')
    .option('--force', 'rerun the named stages (all: every stage) even when fresh')
    .option('--dry-run', 'print what would run and why; run nothing')
    .option('--wait', 'wait for another run holding the workspace lock instead of failing')
    .option('--set <stage.key=value>', 'override one profile parameter for this run (repeatable; the value is JSON, else a string), e.g. --set quantize.method=none', (v: string, prev: string[] = []) => [...prev, v])
    .exitOverride()
    .showHelpAfterError(false);

  const globals = (): GlobalOptions & { workdir: string } => {
    const o = program.opts<GlobalOptions>();
    return { ...o, workdir: resolve(o.workdir ?? process.env.TERNFORGE_WORKDIR ?? root) };
  };

  program
    .command('all')
    .description('run every stage that is not fresh')
    .action(async () => {
      code = await run(graph, graph.order, true, globals(), pipeline, root, t0);
    });
  program
    .command('status')
    .description('fresh or stale per stage; exit 1 when anything is stale')
    .option('--why', 'one line per reason: which parameter, file, upstream output or tool changed')
    .action(async (o: { why?: boolean }) => {
      code = await status(graph, root, globals(), o.why === true);
    });
  program
    .command('dag')
    .description('print the stage graph')
    .option('--mermaid', 'as a Mermaid flowchart')
    .action((o: { mermaid?: boolean }) => {
      process.stdout.write(o.mermaid === true ? dagMermaid(graph) : dagText(graph));
    });
  program
    .command('gc')
    .description('delete store dirs and run-cache entries that no profile lock references')
    .action(async () => {
      code = await gc(graph, root, globals());
    });
  program
    .command('lock')
    .description('resolve the pinned sources of the named stages (default: every stage that pins) into profiles/<profile>.lock.json and print what changed')
    .option('--update', 're-resolve every source (a branch may have moved), not only those without a standing entry')
    .argument('[stage...]', 'stages whose sources to lock')
    .action(async (stages: string[], o: { update?: boolean }) => {
      code = await lock(graph, root, globals(), stages, o.update === true);
    });
  for (const extra of options.commands ?? []) {
    const cmd = program.command(extra.name).description(extra.description);
    if (extra.argument !== undefined) cmd.argument(extra.argument);
    cmd.allowUnknownOption().allowExcessArguments(); // the command parses its own options
    cmd.action(async () => {
      const g = globals();
      const ctx: CommandContext = {
        root,
        workdir: g.workdir,
        profile: g.profile,
        overrides: g.set ?? [],
        graph,
        runStages: (stages) => run(graph, stages, false, { ...g, json: false }, pipeline, root, t0, process.stderr),
      };
      code = await extra.run(extra.json === true && g.json === true ? [...cmd.args, '--json'] : cmd.args, ctx);
    });
  }
  program
    .argument('[stage...]', `stage(s) to run, after what they depend on: ${graph.order.join(', ')}`)
    .action(async (stages: string[]) => {
      if (stages.length === 0) {
        program.outputHelp({ error: true });
        code = 2;
        return;
      }
      const known = [...graph.order].sort();
      for (const s of stages) if (!graph.defs.has(s)) return void (code = fail({ reason: 'unknown-stage', stage: s, known }));
      code = await run(graph, stages, false, globals(), pipeline, root, t0);
    });

  try {
    await program.parseAsync([...(options.argv ?? process.argv.slice(2))], { from: 'user' });
  } catch (e) {
    if (e instanceof CommanderError) return e.code === 'commander.helpDisplayed' || e.code === 'commander.help' || e.code === 'commander.version' ? 0 : 2;
    throw e;
  }
  return code;
}

function openSession(graph: Graph, root: string, g: GlobalOptions & { workdir: string }): Session | number {
  const s = Session.open({ root, workdir: g.workdir, profile: g.profile, graph, overrides: g.set ?? [] });
  return s.ok ? s.value : fail(s.error);
}

/** Take the workspace lock (before reading the profile lock: a waiting run must see the last run's lock). */
async function lockWorkspace(g: GlobalOptions & { workdir: string }): Promise<HeldLock | number> {
  const ws = new Workspace(g.workdir);
  const held = await acquireWorkspaceLock(ws.runLock, engineSchemaSet(ws.schemaCache), {
    command: ['tsx', 'pipeline.ts', ...process.argv.slice(2)].join(' '),
    wait: g.wait === true,
    note: (line) => process.stderr.write(`${line}\n`),
  });
  if (!held.ok) return fail(held.error);
  // Anything in tmp/ belongs to a run that no longer holds the lock: an interrupted one.
  rmSync(ws.tmpDir, { recursive: true, force: true });
  return held.value;
}

async function run(graph: Graph, targets: readonly string[], all: boolean, g: GlobalOptions & { workdir: string }, pipeline: PipelineDecl, root: string, t0: number, out: NodeJS.WritableStream = process.stdout): Promise<number> {
  const stages = all ? graph.order : upstreamClosure(graph, targets);
  const forced = new Set(g.force === true ? (all ? graph.order : targets) : []);
  const note = (line: string): void => void process.stderr.write(`${line}\n`);
  let held: HeldLock | null = null;
  if (g.dryRun !== true) {
    const known = knownProfiles(root);
    if (!known.includes(g.profile)) return fail({ reason: 'unknown-profile', profile: g.profile, known });
    const h = await lockWorkspace(g);
    if (typeof h === 'number') return h;
    held = h;
  }
  const s = openSession(graph, root, g);
  if (typeof s === 'number') {
    held?.release();
    return s;
  }
  const abort = new AbortController();
  const onSignal = (sig: NodeJS.Signals): void => {
    note(`${sig}: stopping`);
    abort.abort();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    const result = await runStages(s, { stages, forced, dryRun: g.dryRun === true, signal: abort.signal, note });
    if (g.dryRun !== true && pipeline.links !== undefined) refreshLinks(s.ws, s.profile.name, pipeline.links, note);
    if (g.dryRun !== true && pipeline.publish !== undefined) refreshPublished(s.ws, s.profile.name, pipeline.publish, note);
    await s.close();
    const totalMs = performance.now() - t0;
    const stageMs = result.reports.reduce((n, r) => n + r.stageMs, 0);
    const summary = {
      profile: s.profile.name,
      ok: result.failure === null,
      dryRun: g.dryRun === true,
      stages: result.reports,
      hashedBytes: s.hasher.stats.hashedBytes,
      hashedFiles: s.hasher.stats.hashedFiles,
      cachedFiles: s.hasher.stats.cachedFiles,
      hashMs: Math.round(s.hasher.stats.busyMs * 10) / 10,
      hashIo: s.hasher.hashIo,
      mappedBytes: s.hasher.stats.mappedBytes,
      engineMs: Math.round((totalMs - stageMs) * 10) / 10,
      totalMs: Math.round(totalMs * 10) / 10,
      failure: result.failure,
    };
    if (g.json === true) out.write(JSON.stringify(summary, null, 2) + '\n');
    else out.write(g.dryRun === true ? dryRunText(result.reports) : runText(summary));
    if (result.failure !== null) {
      const rc = fail(result.failure);
      if (result.failure.reason === 'interrupted') {
        held?.release();
        process.exit(130);
      }
      return rc === 2 ? 2 : 1;
    }
    return 0;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    held?.release();
  }
}

function runText(s: { profile: string; stages: StageReport[]; hashedBytes: number; hashedFiles: number; engineMs: number }): string {
  const count = (a: StageReport['action']): number => s.stages.filter((r) => r.action === a).length;
  return `${s.profile}: ran ${count('ran')}, restored ${count('restored')}, fresh ${count('fresh')}${count('failed') > 0 ? ', failed 1' : ''} (hashed ${human(s.hashedBytes)} in ${s.hashedFiles} files; engine ${s.engineMs.toFixed(0)} ms)\n`;
}

function dryRunText(reports: readonly StageReport[]): string {
  const label = { fresh: 'fresh', 'would-run': 'would run', 'would-restore': 'would restore', ran: 'ran', restored: 'restored', failed: 'failed' } as const;
  return reports.map((r) => [`${label[r.action].padEnd(13)}  ${r.stage}`, ...r.reasons.map((x) => `${' '.repeat(15)}${formatReason(x)}`)].join('\n')).join('\n') + '\n';
}

async function status(graph: Graph, root: string, g: GlobalOptions & { workdir: string }, why: boolean): Promise<number> {
  const s = openSession(graph, root, g);
  if (typeof s === 'number') return s;
  const evaluated = await s.evaluateAll(graph.order, new Set());
  await s.close();
  if (!evaluated.ok) return fail(evaluated.error);
  const stale = evaluated.value.some((e) => !e.fresh);
  if (g.json === true) {
    process.stdout.write(JSON.stringify({ profile: s.profile.name, stale, stages: evaluated.value.map((e) => ({ stage: e.stage, fresh: e.fresh, reasons: e.reasons })) }, null, 2) + '\n');
  } else {
    const lines: string[] = [];
    for (const e of evaluated.value) {
      lines.push(`${e.fresh ? 'fresh' : 'stale'}  ${e.stage}`);
      if (why) for (const r of e.reasons) lines.push(`       ${formatReason(r)}`);
    }
    process.stdout.write(lines.join('\n') + '\n');
  }
  return stale ? 1 : 0;
}

async function lock(graph: Graph, root: string, g: GlobalOptions & { workdir: string }, stages: readonly string[], update: boolean): Promise<number> {
  const known = [...graph.order].sort();
  for (const st of stages) if (!graph.defs.has(st)) return fail({ reason: 'unknown-stage', stage: st, known });
  return withLockedSession(graph, root, g, async (s) => {
    const note = (line: string): void => void process.stderr.write(`${line}\n`);
    const targets = stages.length > 0 ? stages : graph.order.filter((st) => graph.defs.get(st)!.pins !== undefined);
    for (const stage of targets) if (s.pinRequests(stage).length === 0) note(`${stage}: pins no sources in profile ${s.profile.name}`);
    const result = await lockPending(s, targets, update, new AbortController().signal, note);
    await s.close();
    const changes = result.ok ? result.value : [];
    if (g.json === true) process.stdout.write(JSON.stringify({ profile: s.profile.name, lockFile: s.pinLock.path, changes, failure: result.ok ? null : result.error }, null, 2) + '\n');
    else process.stdout.write(changes.flatMap(formatPinChange).map((l) => `${l}\n`).join(''));
    return result.ok ? 0 : fail(result.error);
  });
}

/** Runs `body` on a session of the workspace while holding its lock (released however `body` ends). */
async function withLockedSession(graph: Graph, root: string, g: GlobalOptions & { workdir: string }, body: (s: Session) => Promise<number>): Promise<number> {
  const held = await lockWorkspace(g);
  if (typeof held === 'number') return held;
  const s = openSession(graph, root, g);
  if (typeof s === 'number') {
    held.release();
    return s;
  }
  try {
    return await body(s);
  } finally {
    held.release();
  }
}

async function gc(graph: Graph, root: string, g: GlobalOptions & { workdir: string }): Promise<number> {
  return withLockedSession(graph, root, g, async (s) => {
    const r = collectGarbage(s.ws, s.schemas, s.hasher);
    await s.close();
    if (g.json === true) process.stdout.write(JSON.stringify(r, null, 2) + '\n');
    else {
      for (const p of [...r.storeDirs, ...r.runEntries]) process.stdout.write(`removed ${p}\n`);
      process.stdout.write(`freed ${human(r.freedBytes)} (${r.storeDirs.length} store dirs, ${r.runEntries.length} run-cache entries)\n`);
    }
    return 0;
  });
}
