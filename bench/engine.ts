/**
 * `npm run bench:engine`: the engine over a toy pipeline whose stage declares >= 4 GiB of input files.
 *
 *   - single-core in-memory sha256 rate: one 1 GiB update(), best of 3 (the yardstick)
 *   - cold hashing throughput: `all` with an empty hash cache (files in the page cache, as right after
 *     they were written), median of 5; target >= 1.6x the single-core rate on 2 cores. Interleaved
 *     with the same runs forced onto read(2) (TERNFORGE_HASH_IO=read), to show what mmap buys
 *   - engine time of a no-op `all` (target <= 100 ms), and the whole CLI's wall time beside `tsx -e ''`;
 *     also the real pipeline's `dag` (all its stage modules loaded), whose start-up the toy's hides
 *   - the real pipeline.ts's no-op `all` on the tiny profile, everything fresh (target <= 100 ms of engine
 *     time): in $BENCH_REAL_WORKDIR when it holds a complete tiny build of this checkout (e.g. the test
 *     suite's $TERNFORGE_TINY_BUILD), else built first in the temp dir (minutes). With
 *     BENCH_BASELINE=<root>:<workdir>[:<venv>] (another checkout and its own complete tiny build) the same runs of
 *     that checkout are interleaved with this one's, so both meet the same machine state.
 *
 * BENCH_SKIP_COLD=1 leaves out the cold-hashing rounds (the toy no-op still runs, after one build).
 * Prints a table and writes bench/results/engine.json. Needs ~4.5 GiB free under the temp dir.
 */
import { spawnSync } from 'node:child_process';
import { createHash, randomFillSync } from 'node:crypto';
import { closeSync, cpSync, fsyncSync, mkdirSync, mkdtempSync, openSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { availableParallelism, cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';

const repo = join(import.meta.dirname, '..');
const FILES = Number(process.env.BENCH_FILES ?? 16);
const FILE_MIB = Number(process.env.BENCH_FILE_MIB ?? 256);
const RUNS = 5;
const COLD_ROUNDS = 5;
/** Interleaved no-op runs of the real pipeline (and the baseline's): more, as one run is ~100 ms. */
const REAL_RUNS = Number(process.env.BENCH_REAL_RUNS ?? 11);
const SKIP_COLD = process.env.BENCH_SKIP_COLD === '1';

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

function singleCoreRate(): number {
  const buf = Buffer.alloc(2 ** 30, 0x5a);
  let best = Infinity;
  for (let i = 0; i < 3; i++) {
    const t = performance.now();
    createHash('sha256').update(buf).digest();
    best = Math.min(best, performance.now() - t);
  }
  return 2 ** 30 / (best / 1000);
}

const base = mkdtempSync(join(tmpdir(), 'ternforge-bench-'));
try {
  const root = join(base, 'root');
  const work = join(base, 'work');
  const data = join(base, 'data');
  cpSync(join(repo, 'test', 'fixtures', 'engine', 'root'), root, { recursive: true });
  mkdirSync(data);
  process.stderr.write(`generating ${FILES} x ${FILE_MIB} MiB of inputs in ${data}\n`);
  const chunk = randomFillSync(Buffer.alloc(64 * 1024 * 1024));
  const inputs: string[] = [];
  for (let f = 0; f < FILES; f++) {
    const path = join(data, `input-${String(f).padStart(2, '0')}.bin`);
    const fd = openSync(path, 'w');
    for (let c = 0; c < FILE_MIB / 64; c++) {
      chunk.writeUInt32LE(f, 0);
      chunk.writeUInt32LE(c, 4);
      writeSync(fd, chunk);
    }
    // Flushed now, so that the timed hashing does not share the cores with the kernel writing 4 GiB back.
    fsyncSync(fd);
    closeSync(fd);
    inputs.push(path);
  }
  const totalBytes = FILES * FILE_MIB * 2 ** 20;
  writeFileSync(join(root, 'profiles', 'tiny.json'), JSON.stringify({ name: 'tiny', description: 'bench', stages: { a: { value: 1, inputs }, b: {}, c: {}, d: {} } }));
  const env = { ...process.env, TOY_ROOT: root, TOY_GRAPH: 'chain', TERNFORGE_WORKDIR: work };
  const tsx = join(repo, 'node_modules', '.bin', 'tsx');
  type Summary = { hashedBytes: number; mappedBytes: number; hashMs: number; engineMs: number; totalMs: number; hashIo: 'mmap' | 'read' };
  const cli = (extraEnv: Record<string, string> = {}): { wallMs: number; summary: Summary } => {
    const t = performance.now();
    const r = spawnSync(tsx, [join(repo, 'test', 'fixtures', 'engine', 'toy-pipeline.ts'), 'all', '--json'], { env: { ...env, ...extraEnv }, encoding: 'utf8', cwd: repo });
    const wallMs = performance.now() - t;
    if (r.status !== 0) throw new Error(`all failed (${r.status}):\n${r.stderr}`);
    return { wallMs, summary: JSON.parse(r.stdout) };
  };

  process.stderr.write('single-core sha256 (1 GiB update, best of 3)\n');
  const single = SKIP_COLD ? NaN : singleCoreRate();
  // Cold runs (empty workdir, so an empty hash cache) alternate between the default path and read(2),
  // so that both meet the same machine state; the default is the mmap helper when it is built.
  const coldRuns: Array<{ io: 'default' | 'read'; summary: Summary }> = [];
  if (SKIP_COLD) coldRuns.push({ io: 'default', summary: cli().summary });
  for (let round = 0; round < (SKIP_COLD ? 0 : COLD_ROUNDS); round++) {
    for (const io of ['default', 'read'] as const) {
      rmSync(work, { recursive: true, force: true });
      process.stderr.write(`cold all (${io}), round ${round + 1}/${COLD_ROUNDS}\n`);
      const run = cli(io === 'read' ? { TERNFORGE_HASH_IO: 'read' } : {});
      if (run.summary.hashedBytes < totalBytes) throw new Error(`cold run hashed ${run.summary.hashedBytes} < ${totalBytes}`);
      if (io === 'read' && run.summary.mappedBytes !== 0) throw new Error('TERNFORGE_HASH_IO=read mapped bytes');
      coldRuns.push({ io, summary: run.summary });
    }
  }
  const rate = (x: Summary): number => x.hashedBytes / (x.hashMs / 1000);
  const defaults = coldRuns.filter((r) => r.io === 'default').map((r) => r.summary);
  const reads = coldRuns.filter((r) => r.io === 'read').map((r) => r.summary);
  const cold = defaults.find((x) => rate(x) === median(defaults.map(rate)))!;
  const coldRate = rate(cold);
  const readRate = reads.length === 0 ? NaN : median(reads.map(rate));
  const coldEngineRate = cold.hashedBytes / (cold.engineMs / 1000);
  const noop = Array.from({ length: RUNS }, () => cli());
  if (noop.some((n) => n.summary.hashedBytes !== 0)) throw new Error('a no-op run hashed bytes');
  // The real pipeline's start-up: `dag` loads pipeline.ts with every stage and its lib code, and opens no session.
  const realDag = Array.from({ length: RUNS }, () => {
    const t = performance.now();
    const r = spawnSync(tsx, [join(repo, 'pipeline.ts'), 'dag'], { cwd: repo, encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`pipeline.ts dag failed (${r.status}):\n${r.stderr}`);
    return performance.now() - t;
  });
  // The real pipeline's no-op `all` on tiny: this checkout, and the baseline's interleaved with it.
  const realNoop = (r: string, workdir: string, venv?: string): { wallMs: number; summary: Summary & { stages: Array<{ stage: string; action: string }> } } => {
    const t = performance.now();
    const out = spawnSync(tsx, [join(r, 'pipeline.ts'), 'all', '--profile', 'tiny', '--workdir', workdir, '--json'], { cwd: r, encoding: 'utf8', maxBuffer: 64 * 2 ** 20, env: venv === undefined ? process.env : { ...process.env, TERNFORGE_VENV: venv } });
    const wallMs = performance.now() - t;
    if (out.status !== 0) throw new Error(`${r}: pipeline.ts all failed (${out.status}):\n${out.stderr.slice(-4000)}`);
    return { wallMs, summary: JSON.parse(out.stdout) };
  };
  let realWorkdir = process.env.BENCH_REAL_WORKDIR;
  if (realWorkdir === undefined) {
    realWorkdir = join(base, 'real');
    process.stderr.write(`building the real tiny pipeline in ${realWorkdir} (set BENCH_REAL_WORKDIR to reuse a build)\n`);
    realNoop(repo, realWorkdir);
  }
  // root:workdir[:venv]: a baseline whose venv marker names its own python-env key needs its own venv.
  const baseline = process.env.BENCH_BASELINE === undefined ? null : (([r, w, v]) => ({ root: r!, workdir: w!, venv: v }))(process.env.BENCH_BASELINE.split(':'));
  // One settling run each (a changed file's stat is re-read once), then the timed, interleaved runs.
  const checked = (which: string, r: ReturnType<typeof realNoop>): ReturnType<typeof realNoop> => {
    const ran = r.summary.stages.filter((s) => s.action !== 'fresh').map((s) => `${s.stage} ${s.action}`);
    if (ran.length > 0 || r.summary.hashedBytes !== 0) throw new Error(`${which}: not a no-op (${ran.join(', ') || `hashed ${r.summary.hashedBytes} bytes`}): build it completely first`);
    return r;
  };
  realNoop(repo, realWorkdir);
  if (baseline !== null) realNoop(baseline.root, baseline.workdir, baseline.venv);
  const real: Array<ReturnType<typeof realNoop>> = [];
  const base0: Array<ReturnType<typeof realNoop>> = [];
  for (let i = 0; i < REAL_RUNS; i++) {
    process.stderr.write(`real no-op all, run ${i + 1}/${REAL_RUNS}\n`);
    real.push(checked('this checkout', realNoop(repo, realWorkdir)));
    if (baseline !== null) base0.push(checked(`baseline ${baseline.root}`, realNoop(baseline.root, baseline.workdir, baseline.venv)));
  }
  const bare = Array.from({ length: RUNS }, () => {
    const t = performance.now();
    spawnSync(tsx, ['-e', ''], { cwd: repo });
    return performance.now() - t;
  });

  const gib = (b: number): string => `${(b / 2 ** 30).toFixed(2)} GiB/s`;
  const results = {
    machine: { cores: availableParallelism(), cpu: cpus()[0]?.model ?? 'unknown', node: process.version },
    inputBytes: totalBytes,
    inputFiles: FILES,
    singleCoreSha256BytesPerS: single,
    hashIo: cold.hashIo,
    coldMappedBytes: cold.mappedBytes,
    coldHashBytesPerS: coldRate,
    coldVsSingleCore: coldRate / single,
    coldVsSingleCoreRuns: defaults.map((x) => rate(x) / single),
    coldHashMs: cold.hashMs,
    coldEngineMs: cold.engineMs,
    readHashBytesPerS: readRate,
    readVsSingleCore: readRate / single,
    readVsSingleCoreRuns: reads.map((x) => rate(x) / single),
    coldBytesPerEngineS: coldEngineRate,
    noopEngineMsMedian: median(noop.map((n) => n.summary.engineMs)),
    noopEngineMs: noop.map((n) => n.summary.engineMs),
    noopCliWallMsMedian: median(noop.map((n) => n.wallMs)),
    tsxEmptyWallMsMedian: median(bare),
    realPipelineDagWallMsMedian: median(realDag),
    realNoopEngineMsMedian: median(real.map((r) => r.summary.engineMs)),
    realNoopEngineMs: real.map((r) => r.summary.engineMs),
    realNoopCliWallMsMedian: median(real.map((r) => r.wallMs)),
    ...(baseline === null ? {} : {
      baselineNoopEngineMsMedian: median(base0.map((r) => r.summary.engineMs)),
      baselineNoopEngineMs: base0.map((r) => r.summary.engineMs),
      baselineNoopCliWallMsMedian: median(base0.map((r) => r.wallMs)),
    }),
    loadAverage: loadavg(),
    targets: { coldVsSingleCore: 1.6, noopEngineMs: 100 },
  };
  const rows: Array<[string, string, string]> = [
    ['single-core sha256, in memory', gib(single), ''],
    [`cold hashing (${cold.hashIo}: ${(cold.mappedBytes / 2 ** 30).toFixed(1)} GiB mapped), ${FILES} files, ${(totalBytes / 2 ** 30).toFixed(1)} GiB, median of ${COLD_ROUNDS}`, gib(coldRate), `${results.coldVsSingleCore.toFixed(2)}x single core (target >= 1.6x); runs: ${results.coldVsSingleCoreRuns.map((x) => x.toFixed(2)).join(', ')}`],
    ['cold hashing, TERNFORGE_HASH_IO=read, interleaved', gib(readRate), `${results.readVsSingleCore.toFixed(2)}x single core; runs: ${results.readVsSingleCoreRuns.map((x) => x.toFixed(2)).join(', ')}`],
    ['cold all: input bytes / whole engine time', gib(coldEngineRate), `engine ${cold.engineMs.toFixed(0)} ms incl. schema compile, worker start`],
    ['no-op all: engine time (median of 5)', `${results.noopEngineMsMedian.toFixed(1)} ms`, `target <= 100 ms; runs: ${results.noopEngineMs.join(', ')}`],
    ['no-op all: whole CLI wall time (median)', `${results.noopCliWallMsMedian.toFixed(0)} ms`, ''],
    ["real pipeline.ts dag wall time (median)", `${results.realPipelineDagWallMsMedian.toFixed(0)} ms`, 'every stage and its lib code loaded; no session'],
    [`real pipeline.ts no-op all (tiny): engine time (median of ${REAL_RUNS})`, `${results.realNoopEngineMsMedian.toFixed(1)} ms`, `target <= 100 ms; runs: ${results.realNoopEngineMs.join(', ')}`],
    ['real pipeline.ts no-op all (tiny): whole CLI wall time (median)', `${results.realNoopCliWallMsMedian.toFixed(0)} ms`, ''],
    ...(baseline === null ? [] : [
      [`baseline (${baseline.root}) no-op all: engine time, interleaved`, `${results.baselineNoopEngineMsMedian!.toFixed(1)} ms`, `runs: ${results.baselineNoopEngineMs!.join(', ')}`],
      ['baseline no-op all: whole CLI wall time (median)', `${results.baselineNoopCliWallMsMedian!.toFixed(0)} ms`, ''],
    ] as Array<[string, string, string]>),
    ["tsx -e '' wall time (median)", `${results.tsxEmptyWallMsMedian.toFixed(0)} ms`, 'start-up cost included in the wall times above'],
    ['load average (1, 5, 15 min) at the end', results.loadAverage.map((x) => x.toFixed(2)).join(' '), `${availableParallelism()} cores`],
  ];
  // Without the cold rounds, their rows (and the single-core yardstick) say nothing.
  if (SKIP_COLD) rows.splice(0, 4);
  const w0 = Math.max(...rows.map((r) => r[0].length));
  const w1 = Math.max(...rows.map((r) => r[1].length));
  for (const [a, b, c] of rows) console.log(`${a.padEnd(w0)}  ${b.padStart(w1)}  ${c}`);
  mkdirSync(join(repo, 'bench', 'results'), { recursive: true });
  writeFileSync(join(repo, 'bench', 'results', SKIP_COLD ? 'engine-noop.json' : 'engine.json'), JSON.stringify(results, null, 2) + '\n');
} finally {
  rmSync(base, { recursive: true, force: true });
}
