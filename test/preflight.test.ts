/**
 * `tsx pipeline.ts preflight`: the real command, worker and mini-runs on tiny (go), and its refusals with their
 * messages: a CUDA profile on a machine without a GPU (device, and the kernels it would lack), a gated hub source
 * without a token, with a token the hub refuses, and readable with one it accepts (a local hub,
 * python/tests/hub_server.py --spec), and too little GPU memory for the 4B's distillation (decide() on the
 * 4B's shape).
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { engineSchemaSet } from '../engine/json-io.ts';
import { evalPlan } from '../lib/preflight/command.ts';
import { atDepth, decide, type DecideInput } from '../lib/preflight/decide.ts';
import type { PreflightReport } from '../schemas/generated/preflight-report.ts';
import type { PreflightFacts } from '../schemas/generated/preflight-result.ts';

const REPO = join(import.meta.dirname, '..');
const VENV = process.env.TERNFORGE_VENV || join(REPO, '.ternforge', 'venv');
let base: string;

interface Cli {
  code: number | null;
  stdout: string;
  stderr: string;
}
/** A real process in the repository root: its exit code and everything it printed. */
function spawnCli(file: string, args: string[], env: Record<string, string>): Promise<Cli> {
  const child = spawn(file, args, { cwd: REPO, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve) => child.once('close', (code) => resolve({ code, stdout, stderr })));
}
const run = (cmd: string[], env: Record<string, string>): Promise<Cli> => spawnCli(process.execPath, ['--import', 'tsx', ...cmd], env);
const baseEnv = (): Record<string, string> => ({ ...(process.env as Record<string, string>), TERNFORGE_VENV: VENV, HF_HUB_DISABLE_TELEMETRY: '1', HF_HOME: join(base, 'hf') });
const row = (r: PreflightReport, check: string) => r.checks.find((c) => c.check === check);

beforeAll(() => {
  base = mkdtempSync(join(tmpdir(), 'ternforge-preflight-'));
});
afterAll(() => rmSync(base, { recursive: true, force: true }));

describe('on tiny (CPU)', () => {
  let report: PreflightReport;
  let tinyConfig: string;

  test('every check is go, each long phase of gptq+kd is projected from its mini-run, and the report passes its schema', async () => {
    const workdir = join(base, 'tiny');
    const r = await run([join(REPO, 'pipeline.ts'), 'preflight', '--profile', 'tiny', '--workdir', workdir], baseEnv());
    expect(r.stderr).toContain('mini-runs at 4 layers');
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^preflight tiny: GO\n/);
    for (const c of ['device', 'host memory', 'disk', 'kernels']) expect(r.stdout).toMatch(new RegExp(`^go +${c} `, 'm'));
    report = JSON.parse(readFileSync(join(workdir, '.ternforge', 'tiny', 'preflight.json'), 'utf8'));
    expect(engineSchemaSet().validate('preflight-report.schema.json', report)).toEqual([]);
    expect(report.verdict).toBe('go');
    expect(report.phases.map((p) => p.phase)).toEqual(['float budget plan', 'sequential GPTQ', 'distillation', 'quality', 'eval (lm-eval)']);
    expect(report.phases.at(-1)!.basis).toMatch(/^2 models x 24 requests \(the project-written stand-ins\), 16 at a time, every reply to 32 tokens/);
    for (const p of report.phases) expect(p.seconds, p.phase).toBeGreaterThan(0);
    expect(report.total_seconds).toBeCloseTo(report.phases.reduce((n, p) => n + p.seconds!, 0), 6);
    // the facts the projection came from: two depths, real distillation steps, GPTQ of each layer kind
    const f = report.facts;
    expect(f.model).toMatchObject({ layer_count: 4, layers: { linear_attention: 3, full_attention: 1 }, period: 4, hidden: 128 });
    expect(f.mini!.depths.map((d) => d.layers)).toEqual([4, 8]);
    expect(f.mini!.depths[1]!.distill!.latent_params).toBe(2 * f.mini!.depths[0]!.distill!.latent_params);
    expect(Object.keys(f.mini!.gptq!.kinds).sort()).toEqual(['full_attention', 'linear_attention']);
    expect(f.quantize).toMatchObject({ method: 'gptq+kd', device: 'cpu', calibration: { seq_len: 64, sequences: 8, batch_size: 4 }, kd: { steps: 4, batch_size: 4, micro_batch: 4, seq_len: 64, latent_dtype: 'float32' } });
    expect(f.kernels.fast_path).toBe(false);
    expect(f.torch.cuda_available).toBe(false);
    tinyConfig = readFileSync(join(workdir, '.ternforge', 'tiny', 'fetch-model', 'outputs', 'model', 'config.json'), 'utf8');
  }, 600_000);

  test('a distillation step that runs out of memory: a no-go row naming the allocator error, the other mini-runs still measured', async () => {
    const workdir = join(base, 'tiny');
    // a real allocator refusal: 10^10 rows of 64 tokens are 5.1 TB of token ids
    const big = '10000000000';
    const r = await run([join(REPO, 'pipeline.ts'), 'preflight', '--profile', 'tiny', '--workdir', workdir, '--set', `quantize.kd.batch_size=${big}`, '--set', `quantize.kd.micro_batch=${big}`, '--json'], baseEnv());
    expect(r.code, r.stderr).toBe(1);
    const rep = JSON.parse(r.stdout) as PreflightReport;
    expect(row(rep, 'host memory (distillation)')).toMatchObject({ status: 'no-go', measured: 'out of memory at 4 layers', detail: expect.stringMatching(/can't allocate memory.*; lower quantize\.kd\.micro_batch/) });
    expect(rep.facts.mini!.failures).toEqual([expect.objectContaining({ phase: 'distill', layers: 4, kind: 'out_of_memory' })]);
    // not tried again at 8 layers; the forward and GPTQ still measured, the distillation left unprojected
    expect(rep.facts.mini!.depths.map((d) => [d.layers, d.distill === undefined, d.forward !== undefined])).toEqual([[4, true, true], [8, true, true]]);
    expect(rep.phases.find((p) => p.phase === 'distillation')!.seconds).toBeNull();
    expect(rep.phases.find((p) => p.phase === 'sequential GPTQ')!.seconds).toBeGreaterThan(0);
  }, 600_000);

  test('a CUDA device asked for on a machine without one: no-go, naming the device and the kernels it would lack', async () => {
    const workdir = join(base, 'tiny');
    const r = await run([join(REPO, 'pipeline.ts'), 'preflight', '--profile', 'tiny', '--workdir', workdir, '--set', 'quantize.device=cuda', '--no-mini'], { ...baseEnv(), CC: join(base, 'no-such-cc') });
    expect(r.code, r.stderr).toBe(1);
    expect(r.stdout).toMatch(/^no-go +C toolchain +missing +\(needs a C compiler and Python\.h/m);
    expect(r.stdout).toContain(`the C compiler ${join(base, 'no-such-cc')} (CC) does not exist`);
    expect(r.stdout).toMatch(/^preflight tiny: NO-GO\n/);
    expect(r.stdout).toMatch(/^no-go +device +no CUDA device \(torch 2\.13\.0\+cpu, CUDA build none\)/m);
    expect(r.stdout).toMatch(/^no-go +kernels +transformers' PyTorch delta rule \(flash-linear-attention not installed\)/m);
    expect(r.stdout).toContain('python/requirements-cuda.lock.txt');
    const again = JSON.parse(readFileSync(join(workdir, '.ternforge', 'tiny', 'preflight.json'), 'utf8')) as PreflightReport;
    expect(again.verdict).toBe('no-go');
    expect(again.facts.mini).toBeNull();
    // with the slow path allowed, the kernels are a warning and only the device stops the run
    const slow = await run([join(REPO, 'pipeline.ts'), 'preflight', '--profile', 'tiny', '--workdir', workdir, '--set', 'quantize.device=cuda', '--set', 'quantize.allow_slow_kernels=true', '--no-mini', '--json'], baseEnv());
    const s = JSON.parse(slow.stdout) as PreflightReport;
    expect([row(s, 'device')?.status, row(s, 'kernels')?.status]).toEqual(['no-go', 'warn']);
  }, 600_000);

  describe('hub sources (a local hub)', () => {
    let server: ChildProcess;
    let endpoint: string;
    let root: string;
    const specPath = (): string => join(base, 'hub-spec.json');

    beforeAll(async () => {
      root = join(base, 'root');
      mkdirSync(join(root, 'profiles'), { recursive: true });
      for (const d of readdirSync(REPO)) if (!['profiles', 'node_modules', '.ternforge', '.git'].includes(d)) symlinkSync(join(REPO, d), join(root, d));
      const tiny = JSON.parse(readFileSync(join(REPO, 'profiles', 'tiny.json'), 'utf8')) as { name: string; description: string; stages: Record<string, Record<string, unknown>> };
      tiny.name = 'pftest';
      tiny.description = 'preflight against a local hub';
      tiny.stages['fetch-model'] = { source: 'hub', repo: 'org/tiny', revision: 'main' };
      (tiny.stages['fetch-calib']!.sources as unknown[]).push({ name: 'gated-calibration', kind: 'hub-files', dataset: 'org/gated', split: 'train', revision: 'main', role: 'calibration', rows: 10, buckets: [0, 70], files: ['data/train.parquet'], format: 'text', fields: ['text'] });
      writeFileSync(join(root, 'profiles', 'pftest.json'), JSON.stringify(tiny, null, 2));
      writeFileSync(join(root, 'profiles', 'pfabsent.json'), JSON.stringify({ ...tiny, name: 'pfabsent', stages: { ...tiny.stages, 'fetch-model': { source: 'hub', repo: 'org/absent', revision: 'main' } } }, null, 2));
      writeFileSync(specPath(), JSON.stringify({
        pushes: [
          { kind: 'model', repo: 'org/tiny', files: { 'config.json': tinyConfig, 'model.safetensors': 'x'.repeat(1000) } },
          { kind: 'dataset', repo: 'org/gated', files: { 'data/train.parquet': 'p'.repeat(2000) } },
        ],
        gates: [{ kind: 'dataset', repo: 'org/gated', tokens: ['hf_accepted'] }],
      }));
      server = spawn(join(VENV, 'bin', 'python'), [join(REPO, 'python', 'tests', 'hub_server.py'), '--spec', specPath()], { stdio: ['ignore', 'pipe', 'inherit'] });
      endpoint = await new Promise<string>((resolve, reject) => {
        createInterface({ input: server.stdout! }).once('line', (line) => (line.startsWith('HF_ENDPOINT=') ? resolve(line.slice('HF_ENDPOINT='.length)) : reject(new Error(line))));
        server.once('exit', (code) => reject(new Error(`hub_server exited ${code}`)));
      });
    });
    afterAll(() => void server?.kill());

    const preflight = async (token: string | null, profile = 'pftest'): Promise<{ r: Cli; report: PreflightReport }> => {
      const env: Record<string, string> = { ...baseEnv(), HUB_ROOT: root, HF_ENDPOINT: endpoint };
      if (token !== null) env.HF_TOKEN = token;
      else delete env.HF_TOKEN;
      const workdir = join(base, `hub-${profile}-${token ?? 'none'}`);
      const r = await run([join(REPO, 'test', 'fixtures', 'preflight-pipeline.ts'), 'preflight', '--profile', profile, '--workdir', workdir, '--no-mini', '--json'], env);
      if (r.stdout === '') throw new Error(`preflight printed no report (exit ${r.code}):\n${r.stderr}`);
      return { r, report: JSON.parse(r.stdout) as PreflightReport };
    };

    test('a gated source without a token: no-go, saying to accept the terms and set HF_TOKEN; nothing downloaded', async () => {
      const { r, report } = await preflight(null);
      expect(r.code, r.stderr).toBe(1);
      expect(row(report, 'hub model')).toMatchObject({ status: 'go' });
      expect(row(report, 'hub model')!.measured).toMatch(/^model org\/tiny@[0-9a-f]{12}: 2 file\(s\)/);
      const gated = row(report, 'hub gated-calibration')!;
      expect(gated.status).toBe('no-go');
      expect(gated.detail).toBe('dataset org/gated is gated (manual): accept its terms on the hub with your account, then set HF_TOKEN (or run `hf auth login`) on this machine');
      // the model's config.json came from the hub at the listed commit; the mini-runs' shape is tiny's
      expect(report.facts.model?.layer_count).toBe(4);
      const hf = join(base, 'hf');
      const downloaded = existsSync(hf) ? readdirSync(hf, { recursive: true }).map(String).filter((p) => p.endsWith('.parquet') || p.endsWith('.safetensors')) : [];
      expect(downloaded).toEqual([]);
    }, 300_000);

    test('a token the hub refuses: no-go, naming the terms; the accepted token: go', async () => {
      const refused = await preflight('hf_other');
      expect(row(refused.report, 'hub gated-calibration')).toMatchObject({ status: 'no-go', detail: 'dataset org/gated is gated (manual) and the configured token may not read it: accept its terms on the hub with the token\'s account' });
      const ok = await preflight('hf_accepted');
      expect(ok.r.code, ok.r.stderr).toBe(0);
      expect(row(ok.report, 'hub gated-calibration')).toMatchObject({ status: 'go' });
      expect(row(ok.report, 'hub gated-calibration')!.measured).toContain('gated (manual), token ok');
    }, 300_000);

    test('a model repository the hub does not have: no-go for the source and for the shape it would give, still one table', async () => {
      const { r, report } = await preflight('hf_accepted', 'pfabsent');
      expect(r.code, r.stderr).toBe(1);
      expect(row(report, 'hub model')).toMatchObject({ status: 'no-go', detail: 'model repository org/absent does not exist (or is private)' });
      expect(row(report, 'model')).toMatchObject({ status: 'no-go', measured: 'its config.json could not be read' });
      expect(row(report, 'model')!.detail).toMatch(/^RepositoryNotFoundError: /);
      expect(report.phases).toEqual([]);
    }, 300_000);
  });
});

/** A minimal pure-Python wheel of `dist` at `version` (one empty module), written with the venv's zipfile. */
function writeWheel(dir: string, dist: string, version: string): void {
  const script = `
import sys, zipfile
d, dist, v = sys.argv[1:]
info = f"{dist}-{v}.dist-info"
with zipfile.ZipFile(f"{d}/{dist}-{v}-py3-none-any.whl", "w") as z:
    z.writestr(f"{dist}/__init__.py", "")
    z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\\nName: {dist}\\nVersion: {v}\\n")
    z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n")
    z.writestr(f"{info}/RECORD", "")
`;
  execFileSync(join(VENV, 'bin', 'python'), ['-c', script, dir, dist, version]);
}

const gpuCheck = (args: string[], env: Record<string, string>): Promise<Cli> => spawnCli('bash', [join(REPO, 'bench', 'gpu-check.sh'), ...args], env);

describe('bench/gpu-check.sh --tiny (the device check\'s dry run on this CPU)', () => {
  test('writes one JSON result that preflight --facts decides from, with the built-in burst row; carried wheels lie over the interpreter\'s own', async () => {
    const out = join(base, 'gpu-check');
    // The carried wheels go over the interpreter (a venv's, as the device image's python3 is) with its torch still
    // visible. iniconfig is in the workers' venv at another version and nothing the check runs imports it, so the
    // run shows the carried copy shadows the venv's; fla_core is never carried on a CPU.
    const wheels = join(base, 'gpu-wheels');
    mkdirSync(wheels);
    writeWheel(wheels, 'iniconfig', '99.0.0');
    writeWheel(wheels, 'fla_core', '0.0.1');
    const sh = await gpuCheck(['--tiny'], { ...baseEnv(), OUT: out, GPU_CHECK_WHEELS: wheels });
    expect(sh.code, sh.stderr).toBe(0);
    expect(sh.stderr).toMatch(/^gpu-check: .*\/bin\/python \(Python 3\.\d+\.\d+\), torch \S+, 1 carried wheels over it$/m);
    const file = join(out, 'gpu-check-tiny.json');
    const result = JSON.parse(readFileSync(file, 'utf8'));
    expect(result).toMatchObject({ schema: 1, mode: 'tiny', builtin: { tiny: true, requests: 16 } });
    expect(result.carried).toEqual(['iniconfig-99.0.0-py3-none-any.whl']);
    expect(result.versions['fla-core']).toBeNull();
    expect(result.python.executable).toBe(join(VENV, 'bin', 'python'));
    expect(result.exit_codes).toEqual({ preflight: 0, builtin: 0 });
    for (const part of ['events.jsonl', 'preflight.log', 'builtin.json', 'builtin.log']) expect(existsSync(join(out, `gpu-check-tiny.${part}`)), part).toBe(true);
    // each mini-run's figures as it lands: what a run cut off later still brings back
    expect(readFileSync(join(out, 'gpu-check-tiny.preflight.log'), 'utf8')).toMatch(/^preflight: at 4 layers: \{"layers": 4, /m);
    expect(result.facts.mini.depths).toHaveLength(2);
    expect(result.facts.mini.depths[0].generate.steps).toBe(16);
    const r = await run([join(REPO, 'pipeline.ts'), 'preflight', '--profile', 'tiny', '--workdir', join(base, 'facts'), '--facts', file, '--json'], baseEnv());
    expect(r.code, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout) as PreflightReport;
    expect(report.source).toBe(file);
    expect(row(report, 'built-in engine burst')).toMatchObject({ status: 'go', needed: '16 x 64 tokens in 300 s' });
    // the same file where the built-in bench was cut off at its limit: a no-go row that says so, not a crash
    const cut = join(out, 'gpu-check-cut-builtin.json');
    writeFileSync(cut, JSON.stringify({ ...result, builtin: null, exit_codes: { preflight: 0, builtin: 124 } }));
    const rc = await run([join(REPO, 'pipeline.ts'), 'preflight', '--profile', 'tiny', '--workdir', join(base, 'facts'), '--facts', cut, '--json'], baseEnv());
    expect(rc.stderr).not.toMatch(/TypeError/);
    expect(row(JSON.parse(rc.stdout) as PreflightReport, 'built-in engine burst')).toMatchObject({
      status: 'no-go', measured: 'no result', detail: expect.stringMatching(/^bench\/gpu-builtin\.py left no result \(exit 124: cut off at its GPU_CHECK_BUILTIN_S limit\); its \.builtin\.log beside /),
    });
    // a preflight cut off after its first depth: the facts of its last partial event then, and a no-go row that says so
    const partials = readFileSync(join(out, 'gpu-check-tiny.events.jsonl'), 'utf8').split('\n').filter((l) => l.includes('"event": "partial"')).map((l) => JSON.parse(l));
    expect(partials.map((e) => e.facts.mini?.depths.length ?? null)).toEqual([null, 0, 1, 2]);
    const partial = join(out, 'gpu-check-cut-preflight.json');
    writeFileSync(partial, JSON.stringify({ ...result, facts_complete: false, facts: partials[2].facts, exit_codes: { preflight: 124, builtin: 0 } }));
    const rp = await run([join(REPO, 'pipeline.ts'), 'preflight', '--profile', 'tiny', '--workdir', join(base, 'facts'), '--facts', partial, '--json'], baseEnv());
    expect(rp.code, rp.stderr).toBe(1);
    const rep = JSON.parse(rp.stdout) as PreflightReport;
    expect(row(rep, 'preflight')).toMatchObject({ status: 'no-go', measured: 'cut off', detail: expect.stringMatching(/^the preflight worker left no result \(exit 124: cut off at its GPU_CHECK_PREFLIGHT_S limit\)/) });
    expect(rep.phases.find((p) => p.phase === 'distillation')!.seconds).toBeNull();
    const bad = await run([join(REPO, 'pipeline.ts'), 'preflight', '--profile', 'tiny', '--workdir', join(base, 'facts'), '--facts', join(REPO, 'package.json')], baseEnv());
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/^preflight: --facts .*package\.json is not a gpu-check result: /m);
  }, 600_000);

  test('a preflight cut off at its limit: the built-in engine still runs, the result says 124 and has no facts, exit 1', async () => {
    const out = join(base, 'gpu-check-cut');
    const sh = await gpuCheck(['--tiny'], { ...baseEnv(), OUT: out, GPU_CHECK_WHEELS: join(base, 'no-wheels'), GPU_CHECK_PREFLIGHT_S: '1' });
    expect(sh.code, sh.stderr).toBe(1);
    const result = JSON.parse(readFileSync(join(out, 'gpu-check-tiny.json'), 'utf8'));
    expect(result).toMatchObject({ exit_codes: { preflight: 124, builtin: 0 }, facts_complete: false, facts: null, carried: [], builtin: { tiny: true, requests: 16 } });
    const r = await run([join(REPO, 'pipeline.ts'), 'preflight', '--profile', 'tiny', '--workdir', join(base, 'facts-cut'), '--facts', join(out, 'gpu-check-tiny.json')], baseEnv());
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/is not a gpu-check result: /);
  }, 600_000);

  test('an interpreter named by GPU_CHECK_PYTHON that is not there: exit 2 at once, naming it', async () => {
    const sh = await gpuCheck(['--tiny'], { ...baseEnv(), OUT: join(base, 'gpu-check-none'), GPU_CHECK_PYTHON: join(base, 'no-python') });
    expect(sh.code).toBe(2);
    expect(sh.stderr).toMatch(/^gpu-check: GPU_CHECK_PYTHON=.*no-python is not an executable$/m);
    expect(existsSync(join(base, 'gpu-check-none'))).toBe(false);
  });
});

/** The qwen3.5-4b shape (DESIGN.md section 4) with distillation figures on the line PLAN.md section 3's table fits. */
function fourB(latent: 'float32' | 'bfloat16', gpuBytes: number): DecideInput {
  // steady state at d layers and the step above it, so that 32 layers give the table's 67.8 / 87.8 GB (fp32) and 39.7 / 59.7 GB (bf16)
  const [fixed, perLayer] = latent === 'float32' ? [10e9, (67.8e9 - 10e9) / 32] : [6e9, (39.7e9 - 6e9) / 32];
  const depth = (d: number) => ({ layers: d, distill: { tokens: 8192, seconds: 1 + 0.5 * d, steady_bytes: fixed + perLayer * d, peak_bytes: fixed + perLayer * d + 20e9, latent_params: d * 110_000_000 } });
  const facts: PreflightFacts = {
    // the qwen3.5-4b profile's section as the worker parses it
    quantize: {
      method: 'gptq+kd', group_size: 32, device: 'cuda', allow_slow_kernels: false,
      calibration: { seq_len: 2048, sequences: 256, batch_size: 4 }, allocation: { sensitivity: true },
      kd: { steps: 2000, batch_size: 16, micro_batch: 4, seq_len: 2048, latent_dtype: latent, chat_prompts: 512, chat_self_prompts: 512, chat_max_new: 1024, block_steps: 100, block_batch: 8 },
    },
    torch: { version: '2.10.0+cu128', cuda_build: '12.8', cuda_available: true, devices: [{ name: 'NVIDIA H100 80GB HBM3', total_bytes: gpuBytes, capability: '9.0' }], driver: '570.86.15' },
    kernels: { distributions: { 'flash-linear-attention': '0.6.0' }, selected: { chunk_gated_delta_rule: 'fla.ops.gated_delta_rule.chunk' }, fast_path: true, run: { tokens: 2048, heads: 32, seconds: 0.01 }, run_error: null },
    toolchain: { ok: true, cc: '/usr/bin/gcc', python_include: '/usr/include/python3.12', seconds: 0.1, error: null },
    // the profile's kd.chat_engine auto where the CUDA workers' lock has vLLM (python/requirements-cuda.txt)
    chat_engine: { asked: 'auto', engine: 'vllm', reason: 'kd.chat_engine is auto and vLLM imports', error: null, vllm: '0.19.1' },
    hub: [],
    model: { layers: { linear_attention: 24, full_attention: 8 }, layer_count: 32, eligible_per_layer: { linear_attention: 112_721_920, full_attention: 107_479_040 }, embedding_params: 635_699_200, total_params: 4_205_751_296, hidden: 2560, vocab: 248_320, period: 4 },
    model_error: null,
    mini: { depths: [depth(4), depth(8)], gptq: null },
  };
  return {
    profile: 'qwen3.5-4b',
    quality: undefined,
    workersMinDriver: '525.60.13',
    servingMinDriver: '525.60.13',
    checkpointBytes: 9.3e9,
    calibrationBytes: 2e9,
    servingWheels: true,
    host: { mem_available_bytes: 200e9, mem_total_bytes: 250e9, disk_free_bytes: 500e9, disk_path: '/data' },
    facts,
  };
}

describe('decide() on the 4B shape', () => {
  test('the line through two depths reaches the table\'s figures at 32 layers', () => {
    const f = fourB('float32', 80e9).facts;
    expect(atDepth(f.mini!.depths, 32, (d) => d.distill?.peak_bytes)! / 1e9).toBeCloseTo(87.8, 6);
  });

  test('fp32 latents on an 80 GB card: no-go, pointing at bf16 latents; bf16 latents fit; the same fp32 run fits 141 GB', () => {
    const tight = decide(fourB('float32', 80e9));
    expect(tight.verdict).toBe('no-go');
    const mem = tight.checks.find((c) => c.check === 'gpu memory (distillation)')!;
    expect(mem.status).toBe('no-go');
    expect(mem.needed).toBe('87.8 GB + 15% allocator margin = 101.0 GB');
    expect(mem.detail).toContain('set quantize.kd.latent_dtype=bfloat16');
    expect(decide(fourB('bfloat16', 80e9)).checks.find((c) => c.check === 'gpu memory (distillation)')!.status).toBe('go');
    expect(decide(fourB('float32', 141e9)).verdict).toBe('go');
  });

  test('a driver older than CUDA 12 needs: no-go for both stacks; the checkpoint copy must fit host memory', () => {
    const i = fourB('bfloat16', 80e9);
    i.facts.torch.driver = '520.61.05';
    const d = decide(i);
    expect(d.checks.filter((c) => c.check.startsWith('driver')).map((c) => `${c.check} ${c.status} ${c.needed}`)).toEqual(['driver (workers) no-go >= 525.60.13', 'driver (serving) no-go >= 525.60.13']);
    const small = fourB('float32', 141e9);
    small.host.mem_available_bytes = 30e9;
    const host = decide(small).checks.find((c) => c.check === 'host memory')!;
    expect(host.status).toBe('no-go');
    expect(host.detail).toMatch(/the checkpoint's copy in host memory \(4[0-9]\.\d GB\)/);
  });

  test("the eval is projected from the decode step: both models, the real splits' published sizes, every reply to max_tokens", () => {
    const i = fourB('bfloat16', 80e9);
    const withGenerate = (d: number) => ({ ...i.facts.mini!.depths[d === 4 ? 0 : 1]!, generate: { batch: 16, steps: 16, seconds_per_step: 0.01 * d } });
    i.facts.mini = { ...i.facts.mini!, depths: [withGenerate(4), withGenerate(8)] };
    i.eval = evalPlan(REPO, { maxTokens: 4096 }, { sources: (['gpqa-diamond', 'math-500', 'livecodebench', 'mmlu-pro'] as const).map((b) => ({ name: b, benchmark: b, dataset: 'x/y', revision: 'main', role: 'evaluation' as const, format: 'json' as const, splits: { test: ['t'] } })) });
    expect(i.eval).toEqual({ requests: 198 + 500 + 175 + 12_032, concurrency: 16, maxTokens: 4096, models: 2, realSplits: ['gpqa-diamond', 'livecodebench', 'math-500', 'mmlu-pro'] });
    const e = decide(i).phases.find((p) => p.phase === 'eval (lm-eval)')!;
    // the step at the model's 32 layers, fitted through 4 and 8 layers: 0.32 s
    expect(e.seconds).toBeCloseTo(2 * Math.ceil(12_905 / 16) * 4096 * 0.32, 3);
    expect(e.basis).toMatch(/^2 models x 12905 requests \(real splits: gpqa-diamond, livecodebench, math-500, mmlu-pro\), 16 at a time/);
  });

  test('the chat transcripts: vLLM where it imports; auto falling back is a warning with the reason; vllm that cannot run is no-go', () => {
    const chat = (d: ReturnType<typeof decide>) => [d.checks.find((c) => c.check === 'chat transcripts'), d.phases.find((p) => p.phase === 'teacher transcripts')?.basis];
    const [ok, basis] = chat(decide(fourB('bfloat16', 80e9)));
    expect(ok).toMatchObject({ status: 'go', measured: 'vLLM 0.19.1 (offline LLM)', needed: 'kd.chat_engine auto' });
    expect(basis).toMatch(/^1024 answers of up to 1024 tokens at batch 1: \d+ decode steps by vLLM, projected at generate's step as measured \(vLLM is not timed here/);
    const fallback = fourB('bfloat16', 80e9);
    fallback.facts.chat_engine = { asked: 'auto', engine: 'transformers', reason: "vLLM does not import in the workers' environment (No module named 'vllm')", error: null, vllm: null };
    const [warn, generate] = chat(decide(fallback));
    expect(warn).toMatchObject({ status: 'warn', measured: "transformers' generate", detail: "not vLLM: vLLM does not import in the workers' environment (No module named 'vllm')" });
    expect(generate).toMatch(/decode steps by generate, each step as measured at a short context: a lower bound$/);
    expect(decide(fallback).verdict).toBe('go');
    const refused = fourB('bfloat16', 80e9);
    refused.facts.chat_engine = { asked: 'vllm', engine: null, reason: null, error: 'kd.chat_engine is vllm, but 8 ranks: each vLLM would start its own process group beside torchrun\'s', vllm: '0.19.1' };
    const d = decide(refused);
    expect(d.verdict).toBe('no-go');
    expect(chat(d)[0]).toMatchObject({ status: 'no-go', detail: "kd.chat_engine is vllm, but 8 ranks: each vLLM would start its own process group beside torchrun's; set quantize.kd.chat_engine=auto to fall back to generate" });
  });

  test('distillation is projected as steps x micro-batches x the fitted step time', () => {
    const d = decide(fourB('bfloat16', 80e9));
    const kd = d.phases.find((p) => p.phase === 'distillation')!;
    expect(kd.seconds).toBeCloseTo(2000 * 4 * (1 + 0.5 * 32), 6);
    expect(kd.basis).toBe('2000 steps x 4 micro-batch(es), each as measured');
  });
});
