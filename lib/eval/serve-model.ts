/**
 * Serving a model for questions: the server (`python -m ternforge_server`) on a directory it loads, on its
 * own process group, offline, on a free loopback port, stopped when the caller is done. The eval stage
 * serves the emitted submission and the full-precision reference with it; bench:quality serves every
 * packed method.
 *
 * Directories the server loads besides a submission, written here:
 *  - `writeFloatReference`: fetch-model's checkpoint (the weights the ternary model was made from) with
 *    every tensor `float`-encoded in a `quantization_manifest.json`;
 *  - `writePackedServable`: a pack output (`quantization_manifest.json` + `weights/`).
 * Both take the config, tokenizer and chat template files a submission takes from fetch-model
 * (`MODEL_FILES`), and an `architecture.json` when given one (its `serving.sampling_defaults` are then the
 * penalties a request that names none gets, as in the submission). Shards are hard-linked (copied across
 * file systems); nothing in the sources is written.
 */
import type { ProcessPromise } from 'zx';
import { copyFileSync, existsSync, linkSync, mkdirSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import type { Failure } from '../../engine/failure.ts';
import type { StageFailure } from '../failures.ts';
import { contract } from '../contract.ts';
import { manifestPacking } from '../pack/pack-interchange.ts';
import { err, ok, type Result } from '../../engine/result.ts';
import { openCheckpoint } from '../safetensors/checkpoint.ts';
import { stopGroup } from '../smoke/runner.ts';
import { freePort } from '../smoke/smoke.ts';
import { MODEL_FILES, submissionNames } from '../submission/layout.ts';
import { sha256File } from '../submission/wheels.ts';


function linkOrCopy(src: string, dst: string): void {
  if (existsSync(dst)) return;
  try {
    linkSync(src, dst);
  } catch {
    copyFileSync(src, dst);
  }
}

/** Config, tokenizer and chat template from `modelDir`, and `architecture` when given. */
function copyModelFiles(modelDir: string, architecture: string | null, out: string): Result<void, string> {
  const { ARCHITECTURE } = submissionNames();
  for (const { name, required } of MODEL_FILES) {
    if (existsSync(join(modelDir, name))) copyFileSync(join(modelDir, name), join(out, name));
    else if (required) return err(`${join(modelDir, name)} is missing`);
  }
  if (architecture !== null) copyFileSync(architecture, join(out, ARCHITECTURE));
  return ok(undefined);
}

/** Write the float reference of `modelDir` into `out` (created); returns `out`. */
export async function writeFloatReference(modelDir: string, architecture: string | null, out: string): Promise<Result<string, string>> {
  const { MANIFEST, WEIGHTS_DIR } = submissionNames();
  const ckpt = await openCheckpoint(modelDir);
  if (!ckpt.ok) return err(`float reference: ${ckpt.error.message}`);
  const tensors: Record<string, Record<string, unknown>> = {};
  const shards: Array<{ file: string; size: number; sha256: string }> = [];
  try {
    mkdirSync(join(out, WEIGHTS_DIR), { recursive: true });
    for (const file of ckpt.value.files) {
      const rel = `${WEIGHTS_DIR}/${basename(file)}`;
      linkOrCopy(join(modelDir, file), join(out, rel));
      shards.push({ file: rel, size: statSync(join(out, rel)).size, sha256: await sha256File(join(out, rel)) });
    }
    for (const [name, t] of ckpt.value.tensors) {
      tensors[name] = { encoding: 'float', shape: [...t.info.shape], dtype: t.info.dtype, shard: `${WEIGHTS_DIR}/${basename(t.file)}`, data_key: name };
    }
  } finally {
    await ckpt.value.close();
  }
  // A tied output head is stored once, on the embedding, as pack records it.
  const names = Object.keys(tensors);
  const embedding = names.find((n) => n.endsWith('embed_tokens.weight'));
  if (embedding !== undefined && !names.some((n) => n.endsWith('lm_head.weight'))) tensors[embedding]!['tied_to'] = ['lm_head.weight'];
  const manifest = { format: contract().manifest_format, base_model: basename(modelDir), revision: 'fetch-model', method: 'none (full-precision reference)', packing: manifestPacking(), shards, tensors };
  writeFileSync(join(out, MANIFEST), `${JSON.stringify(manifest, null, 2)}\n`);
  const copied = copyModelFiles(modelDir, architecture, out);
  return copied.ok ? ok(out) : err(`float reference: ${copied.error}`);
}

/** Write a servable directory of the pack output `packedDir` into `out` (created); returns `out`. */
export function writePackedServable(packedDir: string, modelDir: string, architecture: string | null, out: string): Result<string, string> {
  const { MANIFEST, WEIGHTS_DIR } = submissionNames();
  if (!existsSync(join(packedDir, MANIFEST))) return err(`${join(packedDir, MANIFEST)} is missing`);
  mkdirSync(join(out, WEIGHTS_DIR), { recursive: true });
  for (const f of readdirSync(join(packedDir, WEIGHTS_DIR))) linkOrCopy(join(packedDir, WEIGHTS_DIR, f), join(out, WEIGHTS_DIR, f));
  copyFileSync(join(packedDir, MANIFEST), join(out, MANIFEST));
  const copied = copyModelFiles(modelDir, architecture, out);
  return copied.ok ? ok(out) : err(`servable ${packedDir}: ${copied.error}`);
}

export interface ServeOptions {
  /** The interpreter that runs the server. */
  python: string;
  /** Put on PYTHONPATH: the directory holding `ternforge_server` (a submission's `server/`, or `python/`). */
  serverPath: string;
  /** The directory the server loads (`--dir`). */
  dir: string;
  /** HOME, TMPDIR and the start-up report go here (created). */
  scratch: string;
  /** How long `/health` may take to answer 200. */
  startupLimitMs: number;
  signal: AbortSignal;
  /** More server flags (e.g. `--frequency-penalty 0.7`). */
  args?: readonly string[];
}

/** Serve `opts.dir`, run `use` against its base URL, stop the server (also when `use` throws). */
export async function serving<T>(opts: ServeOptions, use: (baseUrl: string) => Promise<Result<T, Failure | StageFailure>>): Promise<Result<T, Failure | StageFailure>> {
  mkdirSync(opts.scratch, { recursive: true });
  const port = await freePort();
  const server = await startServer(opts, port);
  let serverLog = '';
  server.process.stderr.on('data', (b: Buffer) => (serverLog = (serverLog + b.toString()).slice(-20_000)));
  try {
    const baseUrl = `http://127.0.0.1:${port}`;
    const ready = await waitHealthy(baseUrl, opts.startupLimitMs, server, opts.signal);
    if (!ready.ok) return err({ reason: 'server-not-ready', detail: `serving ${opts.dir}: ${ready.error}`, logTail: serverLog.split('\n').slice(-20).join('\n') });
    return await use(baseUrl);
  } finally {
    if (server.process.pid !== undefined) await stopGroup(server.process.pid, () => server.exit() !== null);
  }
}

/** The running server (zx) and how it ended: null while it runs, else its exit code or signal. */
interface Server {
  process: ProcessPromise;
  exit: () => string | null;
}

/**
 * The server on its own process group (zx, detached), offline, writing nothing into the served directory.
 * Stopping it is lib/smoke/runner.ts `stopGroup` (SIGTERM to the group, SIGKILL after 10 s).
 */
async function startServer(opts: ServeOptions, port: number): Promise<Server> {
  const { $ } = await import('zx');
  let exit: string | null = null;
  const child = $({
    detached: true,
    nothrow: true,
    quiet: true,
    stdio: ['ignore', 'ignore', 'pipe'],
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      HOME: opts.scratch,
      TMPDIR: opts.scratch,
      PYTHONPATH: opts.serverPath,
      PYTHONDONTWRITEBYTECODE: '1',
      HF_HUB_OFFLINE: '1',
      TRANSFORMERS_OFFLINE: '1',
    },
  })`${opts.python} -m ternforge_server --dir ${opts.dir} --host 127.0.0.1 --port ${String(port)} --startup-report ${join(opts.scratch, 'startup-report.json')} ${[...(opts.args ?? [])]}`;
  void child.then((out) => (exit = String(out.exitCode ?? out.signal)));
  return { process: child, exit: () => exit };
}

/** Seconds until `/health` answered 200; an error when the server exits or the limit passes first. */
async function waitHealthy(baseUrl: string, limitMs: number, server: Server, signal: AbortSignal): Promise<Result<number, string>> {
  const t0 = performance.now();
  while (performance.now() - t0 < limitMs) {
    if (signal.aborted) return { ok: false, error: 'interrupted' };
    if (server.exit() !== null) return { ok: false, error: `the server exited (${server.exit()}) before /health answered 200` };
    const status = await fetch(`${baseUrl}/health`, { signal: AbortSignal.timeout(2000) }).then((r) => r.status, () => 0);
    if (status === 200) return ok((performance.now() - t0) / 1000);
    await new Promise((r) => setTimeout(r, 250));
  }
  return { ok: false, error: `/health did not answer 200 within ${limitMs / 1000} s` };
}
