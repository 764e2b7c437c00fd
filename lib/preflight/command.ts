/**
 * `tsx pipeline.ts preflight --profile <p> [--no-mini] [--gen-tokens N] [--gptq-tokens N] [--json]`: before a long
 * run commits the day, check and measure this machine for the profile and print one go/no-go table.
 *
 * It builds the workers' environment first (python-env; and fetch-model where the source is local or generated,
 * which costs seconds), then runs the worker command `preflight` (python/ternforge/preflight.py: the device,
 * driver, kernels, hub access for every pinned source without downloading, the model's shape, and timed
 * mini-runs of the profile's phases at the real width), adds the host's memory and disk, and decides
 * (lib/preflight/decide.ts). The report is written to `<workdir>/.ternforge/<profile>/preflight.json`
 * (schemas/preflight-report.schema.json). Exit 0 on go, 1 on no-go, 2 on bad usage.
 */
import { readFileSync, statfsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import type { CommandContext, ExtraCommand } from '../../engine/cli.ts';
import { formatFailure } from '../../engine/format-failure.ts';
import { writeFileAtomicSync } from '../../engine/fs-atomic.ts';
import { Session } from '../../engine/session.ts';
import { runWorker } from '../../engine/worker.ts';
import type { FetchCalibParams } from '../../schemas/generated/fetch-calib.ts';
import type { FetchModelParams } from '../../schemas/generated/fetch-model.ts';
import type { PreflightReport } from '../../schemas/generated/preflight-report.ts';
import type { PythonEnvParams } from '../../schemas/generated/python-env.ts';
import type { QuantizeParams } from '../../schemas/generated/quantize.ts';
import type { VendorWheelsParams } from '../../schemas/generated/vendor-wheels.ts';
import { cudaOf, MIN_DRIVER_BY_MAJOR } from '../submission/cuda.ts';
import { parseCompiled } from '../submission/wheels.ts';
import { formatStageFailure } from '../failures.ts';
import { checkWorkerOutcome } from '../worker-results.ts';
import { decide, formatDecision, type HostFacts } from './decide.ts';
import { DEFAULT_REQUIREMENTS } from '../../engine/venv.ts';
import { engineSchemaSet } from '../../engine/json-io.ts';

const USAGE = 'usage: preflight [--profile <p>] [--no-mini] [--gen-tokens N] [--gptq-tokens N] [--json]';
export const REPORT_FILE = 'preflight.json';
export const REPORT_SCHEMA = 'preflight-report.schema.json';

/** The mini-runs a method's phases need. */
export function phasesFor(q: QuantizeParams, quality: boolean): string[] {
  const out = new Set<string>();
  if (quality || q.method !== 'absmean') out.add('forward');
  if (q.method === 'gptq' || q.method === 'gptq+kd') out.add('gptq');
  if (q.method === 'gptq+kd') {
    out.add('distill');
    if ((q.kd?.chat_prompts ?? 0) + (q.kd?.chat_self_prompts ?? 0) > 0) out.add('generate');
  }
  if (q.method === 'none') out.delete('forward');
  return [...out].sort();
}

function host(dir: string): HostFacts {
  const info = readFileSync('/proc/meminfo', 'utf8');
  const kib = (field: string): number => Number(new RegExp(`^${field}:\\s+(\\d+)`, 'm').exec(info)?.[1] ?? 0) * 1024;
  const fs = statfsSync(dir);
  return { mem_available_bytes: kib('MemAvailable'), mem_total_bytes: kib('MemTotal'), disk_free_bytes: fs.bavail * fs.bsize, disk_path: dir };
}

/** The oldest driver of the workers' CUDA stack: from its lock when the profile installs one. */
function workersMinDriver(root: string, env: PythonEnvParams): string | null {
  const file = env.requirements ?? DEFAULT_REQUIREMENTS;
  const text = readFileSync(join(root, file), 'utf8');
  return cudaOf(parseCompiled(text))?.min_driver ?? null;
}

function parseArgs(args: readonly string[]): { json: boolean; mini: boolean; genTokens: number; gptqTokens: number } | string {
  const o = { json: false, mini: true, genTokens: 16, gptqTokens: 1 << 20 };
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (a === '--json') o.json = true;
    else if (a === '--no-mini') o.mini = false;
    else if (a === '--gen-tokens' || a === '--gptq-tokens') {
      const n = Number(args[++i]);
      if (!Number.isInteger(n) || n < 1) return `${a} needs a positive integer`;
      if (a === '--gen-tokens') o.genTokens = n;
      else o.gptqTokens = n;
    } else return `unexpected argument ${a}`;
  }
  return o;
}

export const preflightCommand: ExtraCommand = {
  name: 'preflight',
  description: 'Check and measure this machine for the profile before a run: device, drivers, memory, disk, hub access, kernels, timed mini-runs; one go/no-go table',
  json: true,
  async run(args: string[], ctx: CommandContext): Promise<number> {
    const o = parseArgs(args);
    if (typeof o === 'string') {
      process.stderr.write(`preflight: ${o}\n${USAGE}\n`);
      return 2;
    }
    const opened = Session.open({ root: ctx.root, workdir: ctx.workdir, profile: ctx.profile, graph: ctx.graph, overrides: ctx.overrides });
    if (!opened.ok) {
      process.stderr.write(`error: ${formatFailure(opened.error)}\n`);
      return 2;
    }
    let s = opened.value;
    await s.close();
    const sec = s.profile.sections;
    const fm = sec['fetch-model'] as unknown as FetchModelParams;
    const localModel = fm.source !== 'hub';
    const first = (localModel ? ['python-env', 'fetch-model'] : ['python-env']).filter((st) => ctx.graph.defs.has(st));
    const built = first.length > 0 ? await ctx.runStages(first) : 0;
    if (built !== 0) return built;
    const reopened = Session.open({ root: ctx.root, workdir: ctx.workdir, profile: ctx.profile, graph: ctx.graph, overrides: ctx.overrides });
    if (!reopened.ok) return 2;
    s = reopened.value;

    const q = sec['quantize'] as unknown as QuantizeParams;
    const quality = sec['quality'] as { seq_len?: number; sequences?: number; device?: string } | undefined;
    const hub = ['fetch-model', 'fetch-calib'].filter((st) => ctx.graph.defs.has(st)).flatMap((stage) => {
      const standing = s.standingPins(stage);
      return s.pinRequests(stage).map((request) => ({ request, commit: standing[request.name]?.commit ?? null }));
    });
    const modelConfigDir = localModel ? join(s.upstreamDir('fetch-model'), 'model') : fm.local_path !== undefined ? resolve(ctx.root, fm.local_path) : null;
    const modelHub = fm.source === 'hub' && fm.local_path === undefined ? { repo: fm.repo, revision: hub.find((h) => h.request.kind === 'model')?.commit ?? fm.revision } : null;
    const config = {
      device: q.device ?? 'cpu',
      quantize: q,
      hub,
      model_config_dir: modelConfigDir,
      model_hub: modelHub,
      phases: o.mini ? phasesFor(q, quality !== undefined) : [],
      gen_tokens: o.genTokens,
      gptq_tokens: o.gptqTokens,
    };
    const abort = new AbortController();
    const onSignal = (): void => abort.abort();
    process.once('SIGINT', onSignal);
    const t0 = performance.now();
    const events = await runWorker({ stage: 'preflight', python: s.python, root: ctx.root, tmpDir: s.ws.tmpDir, signal: abort.signal, log: (l) => process.stderr.write(`[preflight] ${l}\n`) }, 'preflight', config);
    process.off('SIGINT', onSignal);
    await s.close();
    if (!events.ok) {
      process.stderr.write(`error: ${formatFailure(events.error)}\n`);
      return 1;
    }
    const outcome = checkWorkerOutcome('preflight', events.value);
    if (!outcome.ok) {
      process.stderr.write(`error: ${formatStageFailure(outcome.error)}\n`);
      return 1;
    }
    const facts = outcome.value.facts;
    const calib = (sec['fetch-calib'] as unknown as FetchCalibParams | undefined)?.sources ?? [];
    const calibNames = new Set(calib.map((c) => c.name));
    const vw = sec['vendor-wheels'] as unknown as VendorWheelsParams | undefined;
    const hostFacts = host(ctx.workdir);
    const decision = decide({
      profile: ctx.profile,
      quantize: q,
      quality,
      workersMinDriver: workersMinDriver(ctx.root, (sec['python-env'] ?? {}) as PythonEnvParams),
      servingMinDriver: vw?.cuda_major !== undefined ? (MIN_DRIVER_BY_MAJOR[vw.cuda_major] ?? null) : null,
      checkpointBytes: facts.hub.find((h) => h.kind === 'model' && h.ok)?.bytes ?? null,
      calibrationBytes: facts.hub.filter((h) => calibNames.has(h.name)).reduce((n, h) => n + h.bytes, 0),
      servingWheels: vw?.cuda_major !== undefined,
      host: hostFacts,
      facts,
    });
    const report: PreflightReport = {
      schema: 1,
      profile: ctx.profile,
      created: new Date().toISOString(),
      seconds: Math.round((performance.now() - t0) / 100) / 10,
      verdict: decision.verdict,
      checks: decision.checks,
      phases: decision.phases,
      total_seconds: decision.total_seconds,
      unmeasured: decision.unmeasured,
      host: hostFacts,
      facts,
    };
    const errors = engineSchemaSet().validate(REPORT_SCHEMA, report);
    if (errors.length > 0) {
      process.stderr.write(`preflight: the report does not pass schemas/${REPORT_SCHEMA}: ${errors.join('; ')}\n`);
      return 1;
    }
    const path = join(dirname(s.ws.lockFile(ctx.profile)), REPORT_FILE);
    writeFileAtomicSync(path, JSON.stringify(report, null, 2) + '\n');
    if (o.json) process.stdout.write(JSON.stringify(report, null, 2) + '\n');
    else process.stdout.write(formatDecision(ctx.profile, decision) + `report: ${path}\n`);
    return decision.verdict === 'go' ? 0 : 1;
  },
};
