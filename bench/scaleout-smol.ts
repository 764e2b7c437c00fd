/**
 * Bench (not CI): `smol` distilled under 2 gloo ranks against one process, and the seed noise it is judged by
 * (issue: scale-out). Three pipeline runs of quantize -> pack -> quality on smol's real weights, in one
 * workdir, at one shortened recipe (BENCH_STEPS distillation steps; the teacher's 32 snippet answers in two
 * batches of 16, so each rank writes one; no self-written requests and no Block-AP, which run whole on every
 * rank anyway):
 *   - one process, seed 0;
 *   - one process, seed 1 (the seed moves GPTQ's and the distillation's draws: the noise);
 *   - 2 ranks (`quantize.launch.nproc_per_node=2`, gloo, one thread per rank), seed 0.
 * Prints the held-out perplexity ratio, KL and top-1 agreement of each, and writes
 * bench/results/scaleout-smol.{json,md}.
 *
 *   npx tsx bench/scaleout-smol.ts [--workdir DIR]      (about 30 minutes on 2 cores; BENCH_STEPS=60)
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const root = join(import.meta.dirname, '..');
const at = process.argv.indexOf('--workdir');
const workdir = at > 0 ? process.argv[at + 1]! : join(root, '.ternforge', 'bench', 'scaleout-smol');
const steps = Number(process.env['BENCH_STEPS'] ?? 60);
const recipe = [
  `quantize.kd.steps=${steps}`,
  'quantize.kd.micro_batch=2',
  'quantize.kd.chat_prompts=32',
  'quantize.kd.chat_self_prompts=0',
  'quantize.kd.block_steps=0',
];

interface Run {
  name: string;
  sets: string[];
}
const runs: Run[] = [
  { name: '1 process, seed 0', sets: ['quantize.seed=0'] },
  { name: '1 process, seed 1', sets: ['quantize.seed=1'] },
  { name: '2 ranks (gloo), seed 0', sets: ['quantize.seed=0', 'quantize.launch.nproc_per_node=2'] },
];

interface Measured {
  name: string;
  seconds: number;
  ppl_ratio: number;
  kl: number;
  top1_agreement: number;
  last10_kl: number | null;
  distributed: unknown;
}

mkdirSync(workdir, { recursive: true });
const results: Measured[] = [];
for (const run of runs) {
  const args = ['--import', 'tsx', join(root, 'pipeline.ts'), 'quality', '--profile', 'smol', '--workdir', workdir, '--wait', ...[...recipe, ...run.sets].flatMap((s) => ['--set', s])];
  process.stderr.write(`\n== ${run.name}: pipeline.ts ${args.slice(2).join(' ')}\n`);
  const t0 = performance.now();
  const r = spawnSync(process.execPath, args, { cwd: root, stdio: ['ignore', 'inherit', 'inherit'] });
  if (r.status !== 0) throw new Error(`${run.name}: the pipeline exited ${r.status}`);
  const seconds = (performance.now() - t0) / 1000;
  const stage = (name: string) => join(workdir, '.ternforge', 'smol', name, 'outputs');
  const quality = JSON.parse(readFileSync(join(stage('quality'), 'quality.json'), 'utf8')) as { metrics: { ppl_ratio: number; kl: number; top1_agreement: number } };
  const report = JSON.parse(readFileSync(join(stage('quantize'), 'quantize_report.json'), 'utf8')) as { kd?: { last10_kl?: number } };
  const record = JSON.parse(readFileSync(join(workdir, '.ternforge', 'smol', 'quantize', 'evidence.json'), 'utf8')) as { summary?: { distributed?: unknown } };
  results.push({ name: run.name, seconds: Math.round(seconds), ...quality.metrics, last10_kl: report.kd?.last10_kl ?? null, distributed: record.summary?.distributed ?? null });
}

const [seed0, seed1, ranks] = results as [Measured, Measured, Measured];
const noise = Math.abs(seed1.ppl_ratio - seed0.ppl_ratio);
const rankDiff = Math.abs(ranks.ppl_ratio - seed0.ppl_ratio);
const lines = [
  `# smol under 2 gloo ranks against one process (${steps} distillation steps, 32 teacher answers, ${new Date().toISOString().slice(0, 10)})`,
  '',
  `Recipe: smol's profile with ${recipe.map((s) => `\`${s}\``).join(', ')}. CPU, 2 cores; one thread per rank.`,
  '',
  '| run | held-out ppl ratio | KL | top-1 agreement | last-10 distillation KL | wall s |',
  '|---|---:|---:|---:|---:|---:|',
  ...results.map((m) => `| ${m.name} | ${m.ppl_ratio.toFixed(4)} | ${m.kl.toFixed(4)} | ${m.top1_agreement.toFixed(4)} | ${m.last10_kl?.toFixed(4) ?? '-'} | ${m.seconds} |`),
  '',
  `Seed noise (seed 1 against seed 0, one process): ${noise.toFixed(4)} in the ppl ratio. 2 ranks against one process at seed 0: ${rankDiff.toFixed(4)}, ${rankDiff <= noise ? 'within' : 'OUTSIDE'} the seed noise.`,
];
const text = lines.join('\n') + '\n';
process.stdout.write(`\n${text}`);
mkdirSync(join(root, 'bench', 'results'), { recursive: true });
writeFileSync(join(root, 'bench', 'results', 'scaleout-smol.md'), text);
writeFileSync(join(root, 'bench', 'results', 'scaleout-smol.json'), JSON.stringify({ steps, recipe, runs: results, seed_noise_ppl_ratio: noise, ranks_diff_ppl_ratio: rankDiff }, null, 2) + '\n');
