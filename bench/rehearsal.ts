/**
 * `npm run bench:rehearsal`: the full-size rehearsal on CPU (issue 15 item 4). A checkpoint of random
 * weights with exactly Qwen3.5-4B's config.json and tensor list (vision tower and MTP head included),
 * written by the `tiny` generator at the real width (python/ternforge/sources/tiny.py, shape `qwen3.5-4b`)
 * in the hub's sharded layout with model.safetensors.index.json and a REVISION file, then taken through
 * every stage with profiles/rehearsal.json: fetch-model (local copy of that snapshot), fetch-calib (tiny's
 * local text), quantize (absmean: the cheapest quantizer, no calibration pass), pack, audit, vendor-wheels
 * (the CPU stack), emit, smoke-serve (max_tokens 4, one graded request plus one at once). Each stage runs
 * as `tsx pipeline.ts <stage> --force` in its own process; the bench records its wall time and the peak
 * resident memory of its whole process tree (sampled from /proc every 200 ms: the sum over the tree, and
 * the largest single process), and its key figures from the stage's evidence record.
 *
 * The audit must count the audited parameters and tensors the config implies (computed here from
 * config.json, independently of the generator's tensor list); for the full config that is DESIGN.md
 * section 4's 3,570,052,096 parameters in 425 tensors, asserted as constants.
 *
 *   npm run bench:rehearsal -- [--layers N] [--workdir DIR] [--from STAGE] [--results NAME] [--clean]
 *
 * --layers N: N text layers at the real width (a reduced run for debugging; default 32, the real model).
 * --workdir: where the snapshot and the pipeline's .ternforge/ live (default $BENCH_WORK, else
 *   .ternforge/bench/rehearsal); the big files stay there, never in bench/results/.
 * --from STAGE: rerun from STAGE on; the rows of earlier stages are kept from the previous results file.
 * --results NAME: bench/results/NAME.json and .md (default `rehearsal`, or `rehearsal-layersN`).
 * --clean: remove the workdir at the end (the snapshot, the run store, dist/).
 * Writes the results after every stage, so a run stopped part-way leaves the finished rows.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';

const root = join(import.meta.dirname, '..');
const python = process.env['TERNFORGE_VENV'] !== undefined ? join(process.env['TERNFORGE_VENV'], 'bin', 'python') : join(root, '.ternforge', 'venv', 'bin', 'python');
const tsx = join(root, 'node_modules', '.bin', 'tsx');
const PROFILE = 'rehearsal';
const STAGES = ['fetch-model', 'fetch-calib', 'quantize', 'pack', 'audit', 'vendor-wheels', 'emit', 'smoke-serve'] as const;
const FULL_LAYERS = 32;
/** DESIGN.md section 4: the audited set of the real checkpoint. */
const FULL_AUDITED_PARAMS = 3_570_052_096;
const FULL_AUDITED_TENSORS = 425;
const SAMPLE_MS = 200;
/** What the smoke figures mean on random weights (printed under the table). */
const NOTES =
  'smoke-serve: the checkpoint carries the tiny tokenizer (448 tokens) under the real config\'s 248,320-row vocabulary, so nearly every id the random model samples decodes to nothing and the controller returns its fallback text; the tokens/s counts the completion tokens (the engine\'s and the short closing phrase\'s). max_tokens is 16 because at 4 the controller\'s closing phrase leaves no token for the engine and no forward pass runs.';

const { values: opts } = parseArgs({
  options: {
    layers: { type: 'string' },
    workdir: { type: 'string' },
    from: { type: 'string' },
    results: { type: 'string' },
    clean: { type: 'boolean', default: false },
  },
});
const layers = opts.layers !== undefined ? Number(opts.layers) : FULL_LAYERS;
if (!Number.isInteger(layers) || layers < 1) throw new Error(`--layers must be a positive integer, got ${String(opts.layers)}`);
const full = layers === FULL_LAYERS;
const work = resolve(opts.workdir ?? process.env['BENCH_WORK'] ?? join(root, '.ternforge', 'bench', 'rehearsal'));
const resultsName = opts.results ?? (full ? 'rehearsal' : `rehearsal-layers${layers}`);
const resultsDir = join(root, 'bench', 'results');
const jsonPath = join(resultsDir, `${resultsName}.json`);
const mdPath = join(resultsDir, `${resultsName}.md`);
const allSteps = ['generate', ...STAGES] as const;
type StepName = (typeof allSteps)[number];
const from: StepName = (opts.from ?? 'generate') as StepName;
if (!allSteps.includes(from)) throw new Error(`--from must be one of ${allSteps.join(', ')}, got ${String(opts.from)}`);

interface Row {
  stage: StepName;
  ok: boolean;
  wall_s: number;
  peak_rss_bytes: number;
  peak_process_rss_bytes: number;
  /** Anonymous memory only (RssAnon): what must fit; the RSS figures include mmapped file pages. */
  peak_anon_rss_bytes?: number;
  peak_process_anon_rss_bytes?: number;
  figures: Record<string, unknown>;
  error?: string;
}

// ---------------------------------------------------------------------------------------------------
// Resident memory of a process tree, from /proc (no psutil).

function procTable(): Map<number, { ppid: number; rss: number }> {
  const page = 4096;
  const out = new Map<number, { ppid: number; rss: number }>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      out.set(Number(name), { ppid: Number(rest[1]), rss: Number(rest[21]) * page });
    } catch {
      // the process ended between readdir and read
    }
  }
  return out;
}

/** RssAnon and RssFile of one process, from /proc/<pid>/status (0 when it has ended). */
function rssSplit(pid: number): { anon: number; file: number } {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (key: string): number => Number(new RegExp(`^${key}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? 0) * 1024;
    return { anon: kb('RssAnon'), file: kb('RssFile') + kb('RssShmem') };
  } catch {
    return { anon: 0, file: 0 };
  }
}

/** Resident memory of the tree under `pid`: the sum (all, and anonymous only) and the largest process.
 * File-backed pages (mmapped safetensors shards) count in RSS but the kernel can drop them; anonymous
 * memory is what must fit. */
function treeRss(pid: number): { sum: number; max: number; anonSum: number; anonMax: number } {
  const table = procTable();
  const children = new Map<number, number[]>();
  for (const [p, { ppid }] of table) children.set(ppid, [...(children.get(ppid) ?? []), p]);
  let sum = 0;
  let max = 0;
  let anonSum = 0;
  let anonMax = 0;
  const stack = [pid];
  while (stack.length > 0) {
    const p = stack.pop()!;
    const e = table.get(p);
    if (e !== undefined) {
      sum += e.rss;
      max = Math.max(max, e.rss);
      const { anon } = rssSplit(p);
      anonSum += anon;
      anonMax = Math.max(anonMax, anon);
    }
    stack.push(...(children.get(p) ?? []));
  }
  return { sum, max, anonSum, anonMax };
}

function gib(bytes: number): string {
  return `${(bytes / 2 ** 30).toFixed(2)} GiB`;
}

/** Run a command, its stderr passed through (the stages' own progress), sampling its tree's memory. */
async function measured(label: string, cmd: string, args: string[]): Promise<{ code: number; stdout: string; wall_s: number; peak: number; peakProc: number; peakAnon: number; peakAnonProc: number }> {
  const t0 = Date.now();
  const child = spawn(cmd, args, { cwd: root, env: { ...process.env, PYTHONPATH: join(root, 'python') }, stdio: ['ignore', 'pipe', 'inherit'] });
  let stdout = '';
  child.stdout.setEncoding('utf8');
  child.stdout.on('data', (d: string) => (stdout += d));
  let peak = 0;
  let peakProc = 0;
  let peakAnon = 0;
  let peakAnonProc = 0;
  let lastBeat = Date.now();
  const timer = setInterval(() => {
    if (child.pid === undefined) return;
    const r = treeRss(child.pid);
    peak = Math.max(peak, r.sum);
    peakProc = Math.max(peakProc, r.max);
    peakAnon = Math.max(peakAnon, r.anonSum);
    peakAnonProc = Math.max(peakAnonProc, r.anonMax);
    if (Date.now() - lastBeat >= 60_000) {
      lastBeat = Date.now();
      process.stderr.write(`bench:rehearsal: ${label}: running ${((Date.now() - t0) / 1000).toFixed(0)} s, tree RSS now ${gib(r.sum)} (anonymous ${gib(r.anonSum)}), peak ${gib(peak)} (anonymous ${gib(peakAnon)})\n`);
    }
  }, SAMPLE_MS);
  const code = await new Promise<number>((res) => child.on('close', (c) => res(c ?? 1)));
  clearInterval(timer);
  return { code, stdout, wall_s: (Date.now() - t0) / 1000, peak, peakProc, peakAnon, peakAnonProc };
}

// ---------------------------------------------------------------------------------------------------
// What the audit must count, from config.json alone (DESIGN.md section 4: the text model without the
// input embedding; the head is tied; the vision tower and the MTP head are not audited).

interface TextConfig {
  hidden_size: number;
  intermediate_size: number;
  layer_types: string[];
  num_attention_heads: number;
  num_key_value_heads: number;
  head_dim: number;
  linear_num_key_heads: number;
  linear_num_value_heads: number;
  linear_key_head_dim: number;
  linear_value_head_dim: number;
  linear_conv_kernel_dim: number;
}

export function expectedAudit(t: TextConfig): { params: number; tensors: number } {
  const h = t.hidden_size;
  const keyDim = t.linear_num_key_heads * t.linear_key_head_dim;
  const valueDim = t.linear_num_value_heads * t.linear_value_head_dim;
  const convDim = 2 * keyDim + valueDim;
  const mlp = 3 * t.intermediate_size * h;
  const norms = 2 * h;
  const linear = [convDim * h, valueDim * h, t.linear_num_value_heads * h, t.linear_num_value_heads * h, convDim * t.linear_conv_kernel_dim, t.linear_num_value_heads, t.linear_num_value_heads, t.linear_value_head_dim, h * valueDim];
  const attention = [2 * t.num_attention_heads * t.head_dim * h, t.num_key_value_heads * t.head_dim * h, t.num_key_value_heads * t.head_dim * h, h * t.num_attention_heads * t.head_dim, t.head_dim, t.head_dim];
  const sum = (xs: number[]): number => xs.reduce((a, b) => a + b, 0);
  let params = h; // the final norm
  let tensors = 1;
  for (const kind of t.layer_types) {
    const own = kind === 'linear_attention' ? linear : attention;
    params += sum(own) + mlp + norms;
    tensors += own.length + 3 + 2;
  }
  return { params, tensors };
}

// ---------------------------------------------------------------------------------------------------

function evidence(stage: string): Record<string, unknown> {
  const p = join(work, '.ternforge', PROFILE, stage, 'evidence.json');
  return existsSync(p) ? ((JSON.parse(readFileSync(p, 'utf8')) as { summary?: Record<string, unknown> }).summary ?? {}) : {};
}

function duBytes(dir: string): number {
  const r = spawnSync('du', ['-sbL', dir], { encoding: 'utf8' });
  return r.status === 0 ? Number(r.stdout.split('\t')[0]) : 0;
}

function figuresOf(stage: StepName, summary: Record<string, unknown>): Record<string, unknown> {
  const outputs = join(work, '.ternforge', PROFILE, stage, 'outputs');
  const written = existsSync(outputs) ? duBytes(outputs) : undefined;
  const f: Record<string, unknown> = written !== undefined ? { bytes_written: written } : {};
  const pick = (...keys: string[]): void => {
    for (const k of keys) if (summary[k] !== undefined) f[k] = summary[k];
  };
  if (stage === 'fetch-model') pick('tensor_count', 'total_size');
  if (stage === 'fetch-calib') pick('tokens_by_role');
  if (stage === 'quantize') pick('method', 'group_size', 'totals', 'ternary_fraction_incl_embedding');
  if (stage === 'pack') pick('bytes', 'tensors', 'ternary', 'codes', 'floats', 'scales');
  if (stage === 'audit') pick('pass', 'audited_tensors', 'original', 'stored', 'stored_ratio', 'ternary_fraction', 'failed_gates');
  if (stage === 'vendor-wheels') pick('linked', 'copied');
  if (stage === 'emit') pick('bytes', 'files');
  if (stage === 'smoke-serve') {
    pick('passed', 'health_200_s', 'phases', 'graded');
    const load = summary['load'] as Record<string, unknown> | null | undefined;
    if (load) f['load'] = load;
    if (load && load['tokens_per_s'] !== undefined) f['tokens_per_s'] = load['tokens_per_s'];
  }
  return f;
}

const previous: Row[] = existsSync(jsonPath) ? ((JSON.parse(readFileSync(jsonPath, 'utf8')) as { stages?: Row[] }).stages ?? []) : [];
const rows: Row[] = [];
const started = new Date().toISOString();
let expected: { params: number; tensors: number } | null = null;
let revision = '';
let problems: string[] = [];

function write(done: boolean): void {
  mkdirSync(resultsDir, { recursive: true });
  const doc = {
    bench: 'rehearsal',
    started,
    finished: done ? new Date().toISOString() : null,
    complete: done && rows.length === allSteps.length && rows.every((r) => r.ok),
    ok: done && problems.length === 0 && rows.length === allSteps.length && rows.every((r) => r.ok),
    problems,
    config: { shape: 'qwen3.5-4b', layers, full, revision, profile: `profiles/${PROFILE}.json`, quantize: 'absmean (the cheapest quantizer; no calibration pass)' },
    expected_audit: expected,
    machine: { cpus: cpus().length, memory_bytes: totalmem(), note: 'shared with other jobs; every stage under nice -n 15 when the bench is' },
    stages: rows,
  };
  writeFileSync(jsonPath, JSON.stringify(doc, null, 2) + '\n');
  const fmtFig = (r: Row): string => {
    const f = r.figures;
    const parts: string[] = [];
    const n = (x: unknown): string => (typeof x === 'number' ? x.toLocaleString('en-US') : String(x));
    if (f['bytes_written'] !== undefined) parts.push(`written ${n(f['bytes_written'])} B`);
    if (r.stage === 'generate') parts.push(`${n(f['tensor_count'])} tensors, ${n(f['total_size'])} B of weights`);
    if (r.stage === 'fetch-model') parts.push(`${n(f['tensor_count'])} tensors`);
    if (r.stage === 'pack') parts.push(`${n(f['ternary'])} ternary of ${n(f['tensors'])} tensors`);
    if (r.stage === 'audit') parts.push(`audited ${n(f['original'])} params in ${n(f['audited_tensors'])} tensors, pass ${String(f['pass'])}`);
    if (r.stage === 'smoke-serve') parts.push(`passed ${String(f['passed'])}, /health 200 after ${n(f['health_200_s'])} s, ${n(f['tokens_per_s'])} tok/s`);
    if (r.error !== undefined) parts.push(`FAILED: ${r.error.split('\n')[0]!.slice(0, 200)}`);
    return parts.join('; ');
  };
  const lines = [
    `# CPU rehearsal: ${full ? 'full size' : `${layers} of 32 layers at full width`} (Qwen3.5-4B config, random weights)`,
    '',
    `Started ${started}${done ? `, finished ${doc.finished}` : ' (in progress or stopped)'}; ${cpus().length} CPUs, ${gib(totalmem())} RAM, shared with other jobs. Quantize: absmean.`,
    `Expected audit (from config.json): ${expected ? `${expected.params.toLocaleString('en-US')} params in ${expected.tensors} tensors` : 'n/a'}.${problems.length > 0 ? ` Problems: ${problems.join('; ')}` : ''}`,
    '',
    '| stage | ok | wall time | peak RSS (tree) | of it anonymous | peak RSS (one process) | key figures |',
    '|---|---|---|---|---|---|---|',
    ...rows.map((r) => `| ${r.stage} | ${r.ok ? 'yes' : 'no'} | ${r.wall_s.toFixed(1)} s | ${gib(r.peak_rss_bytes)} | ${r.peak_anon_rss_bytes !== undefined ? gib(r.peak_anon_rss_bytes) : 'n/a'} | ${gib(r.peak_process_rss_bytes)} | ${fmtFig(r)} |`),
    '',
    'Peak RSS is the largest sum over the stage\'s process tree, sampled from /proc every 200 ms; it counts the pages of mmapped files (safetensors shards), which the kernel can drop. "Of it anonymous" is the peak of the tree\'s RssAnon: the memory that must fit.',
    '',
    NOTES,
    '',
  ];
  writeFileSync(mdPath, lines.join('\n'));
}

async function main(): Promise<number> {
  mkdirSync(work, { recursive: true });
  const snapshotDir = join(work, 'snapshot');
  const fromIdx = allSteps.indexOf(from);
  for (const step of allSteps) {
    const idx = allSteps.indexOf(step);
    if (idx < fromIdx) {
      const kept = previous.find((r) => r.stage === step);
      if (kept === undefined) throw new Error(`--from ${from}: no row for ${step} in ${jsonPath} to keep`);
      rows.push(kept);
      if (step === 'generate') {
        revision = String(kept.figures['revision']);
        expected = expectedAudit((JSON.parse(readFileSync(join(snapshotDir, 'model', 'config.json'), 'utf8')) as { text_config: TextConfig }).text_config);
      }
      continue;
    }
    process.stderr.write(`bench:rehearsal: ${step}: start (${new Date().toISOString()})\n`);
    let row: Row;
    if (step === 'generate') {
      const m = await measured(step, python, ['-m', 'ternforge.sources.tiny', 'snapshot', '--shape', 'qwen3.5-4b', '--layers', String(layers), '--out', snapshotDir]);
      const result = m.stdout.split('\n').filter((l) => l.includes('"result"')).map((l) => JSON.parse(l) as Record<string, unknown>)[0] ?? {};
      revision = String(result['revision'] ?? '');
      row = { stage: step, ok: m.code === 0 && revision !== '', wall_s: m.wall_s, peak_rss_bytes: m.peak, peak_process_rss_bytes: m.peakProc, peak_anon_rss_bytes: m.peakAnon, peak_process_anon_rss_bytes: m.peakAnonProc, figures: { ...result, bytes_written: duBytes(join(snapshotDir, 'model')) } };
      if (!row.ok) row.error = `generator exit ${m.code}`;
    } else {
      const sets = [`fetch-model.local_path=${join(snapshotDir, 'model')}`, `fetch-model.revision=${revision}`];
      const args = [join(root, 'pipeline.ts'), step, '--profile', PROFILE, '--workdir', work, '--json', '--force', ...sets.flatMap((s) => ['--set', s])];
      const m = await measured(step, tsx, args);
      let report: { ok?: boolean; failure?: unknown } = {};
      try {
        report = JSON.parse(m.stdout) as typeof report;
      } catch {
        // no JSON: the CLI failed before running
      }
      const ok = m.code === 0 && report.ok === true;
      row = { stage: step, ok, wall_s: m.wall_s, peak_rss_bytes: m.peak, peak_process_rss_bytes: m.peakProc, peak_anon_rss_bytes: m.peakAnon, peak_process_anon_rss_bytes: m.peakAnonProc, figures: figuresOf(step, ok ? evidence(step) : {}) };
      if (!ok) row.error = report.failure !== undefined ? JSON.stringify(report.failure).slice(0, 4000) : `exit ${m.code}: ${m.stdout.slice(-2000)}`;
    }
    if (step === 'generate' && row.ok) {
      expected = expectedAudit((JSON.parse(readFileSync(join(snapshotDir, 'model', 'config.json'), 'utf8')) as { text_config: TextConfig }).text_config);
      if (full && (expected.params !== FULL_AUDITED_PARAMS || expected.tensors !== FULL_AUDITED_TENSORS)) {
        problems.push(`config.json implies ${expected.params} params in ${expected.tensors} tensors, DESIGN.md says ${FULL_AUDITED_PARAMS} in ${FULL_AUDITED_TENSORS}`);
      }
    }
    if (step === 'audit' && row.ok) {
      // The full run is held to DESIGN.md's constants; a reduced one to what its config.json implies.
      const want = full ? { params: FULL_AUDITED_PARAMS, tensors: FULL_AUDITED_TENSORS } : expected;
      if (want === null) throw new Error('no expected audit counts: the generate step did not run or failed');
      row.figures['expected_params'] = want.params;
      row.figures['expected_tensors'] = want.tensors;
      if (row.figures['original'] !== want.params || row.figures['audited_tensors'] !== want.tensors) {
        row.ok = false;
        row.error = `audit counted ${String(row.figures['original'])} params in ${String(row.figures['audited_tensors'])} tensors, expected ${want.params} in ${want.tensors}`;
      }
    }
    rows.push(row);
    process.stderr.write(`bench:rehearsal: ${step}: ${row.ok ? 'ok' : 'FAILED'} in ${row.wall_s.toFixed(1)} s, peak tree RSS ${gib(row.peak_rss_bytes)}${row.error !== undefined ? `: ${row.error.slice(0, 500)}` : ''}\n`);
    write(false);
    if (!row.ok) break;
  }
  problems = [...problems, ...rows.filter((r) => !r.ok).map((r) => `${r.stage} failed`)];
  write(true);
  process.stdout.write(readFileSync(mdPath, 'utf8'));
  if (opts.clean) {
    rmSync(work, { recursive: true, force: true });
    process.stderr.write(`bench:rehearsal: removed ${work}\n`);
  } else if (existsSync(work)) {
    process.stderr.write(`bench:rehearsal: big files kept in ${work} (${gib(duBytes(work))}); --clean removes them\n`);
  }
  return problems.length === 0 && rows.length === allSteps.length ? 0 : 1;
}

process.exitCode = await main();
