/**
 * `npm run bench:engine`: the engine over a toy pipeline whose stage declares >= 4 GiB of input files.
 *
 *   - single-core in-memory sha256 rate: one 1 GiB update(), best of 3 (the yardstick)
 *   - cold hashing throughput: the first `all` with an empty hash cache (files in the page cache, as
 *     right after they were written); target >= 1.6x the single-core rate on 2 cores
 *   - engine time of a no-op `all` (target <= 100 ms), and the whole CLI's wall time beside `tsx -e ''`
 *
 * Prints a table and writes bench/results/engine.json. Needs ~4.5 GiB free under the temp dir.
 */
import { spawnSync } from 'node:child_process';
import { createHash, randomFillSync } from 'node:crypto';
import { closeSync, cpSync, fsyncSync, mkdirSync, mkdtempSync, openSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { availableParallelism, cpus, tmpdir } from 'node:os';
import { join } from 'node:path';

const repo = join(import.meta.dirname, '..');
const FILES = Number(process.env.BENCH_FILES ?? 16);
const FILE_MIB = Number(process.env.BENCH_FILE_MIB ?? 256);
const RUNS = 5;

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
  const cli = (): { wallMs: number; summary: { hashedBytes: number; hashMs: number; engineMs: number; totalMs: number } } => {
    const t = performance.now();
    const r = spawnSync(tsx, [join(repo, 'test', 'fixtures', 'engine', 'toy-pipeline.ts'), 'all', '--json'], { env, encoding: 'utf8', cwd: repo });
    const wallMs = performance.now() - t;
    if (r.status !== 0) throw new Error(`all failed (${r.status}):\n${r.stderr}`);
    return { wallMs, summary: JSON.parse(r.stdout) };
  };

  process.stderr.write('single-core sha256 (1 GiB update, best of 3)\n');
  const single = singleCoreRate();
  process.stderr.write('cold all\n');
  const cold = cli();
  if (cold.summary.hashedBytes < totalBytes) throw new Error(`cold run hashed ${cold.summary.hashedBytes} < ${totalBytes}`);
  const coldRate = cold.summary.hashedBytes / (cold.summary.hashMs / 1000);
  const coldEngineRate = cold.summary.hashedBytes / (cold.summary.engineMs / 1000);
  const noop = Array.from({ length: RUNS }, () => cli());
  if (noop.some((n) => n.summary.hashedBytes !== 0)) throw new Error('a no-op run hashed bytes');
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
    coldHashBytesPerS: coldRate,
    coldVsSingleCore: coldRate / single,
    coldHashMs: cold.summary.hashMs,
    coldEngineMs: cold.summary.engineMs,
    coldBytesPerEngineS: coldEngineRate,
    noopEngineMsMedian: median(noop.map((n) => n.summary.engineMs)),
    noopEngineMs: noop.map((n) => n.summary.engineMs),
    noopCliWallMsMedian: median(noop.map((n) => n.wallMs)),
    tsxEmptyWallMsMedian: median(bare),
    targets: { coldVsSingleCore: 1.6, noopEngineMs: 100 },
  };
  const rows: Array<[string, string, string]> = [
    ['single-core sha256, in memory', gib(single), ''],
    [`cold hashing, ${FILES} files, ${(totalBytes / 2 ** 30).toFixed(1)} GiB`, gib(coldRate), `${results.coldVsSingleCore.toFixed(2)}x single core (target >= 1.6x)`],
    ['cold all: input bytes / whole engine time', gib(coldEngineRate), `engine ${cold.summary.engineMs.toFixed(0)} ms incl. schema compile, worker start`],
    ['no-op all: engine time (median of 5)', `${results.noopEngineMsMedian.toFixed(1)} ms`, `target <= 100 ms; runs: ${results.noopEngineMs.join(', ')}`],
    ['no-op all: whole CLI wall time (median)', `${results.noopCliWallMsMedian.toFixed(0)} ms`, ''],
    ["tsx -e '' wall time (median)", `${results.tsxEmptyWallMsMedian.toFixed(0)} ms`, 'start-up cost included above'],
  ];
  const w0 = Math.max(...rows.map((r) => r[0].length));
  const w1 = Math.max(...rows.map((r) => r[1].length));
  for (const [a, b, c] of rows) console.log(`${a.padEnd(w0)}  ${b.padStart(w1)}  ${c}`);
  mkdirSync(join(repo, 'bench', 'results'), { recursive: true });
  writeFileSync(join(repo, 'bench', 'results', 'engine.json'), JSON.stringify(results, null, 2) + '\n');
} finally {
  rmSync(base, { recursive: true, force: true });
}
