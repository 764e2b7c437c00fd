/**
 * Assemble a submission directory from the upstream outputs: exactly the contract's files, hard-linked
 * from the content store where the file system allows (copied otherwise), never the source's float
 * weights. Files that come from the repository (serve.sh, server code) are copied, so a later edit of
 * the repository can never change an emitted file through a shared inode.
 */
import { chmodSync, copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { prettyJson } from '../../engine/digest.ts';
import { readJsonFile, type SchemaSet } from '../../engine/json-io.ts';
import { err, ok, type Result } from '../../engine/result.ts';
import type { AssemblyFailure } from '../failures.ts';
import type { QuantizationManifest } from '../../schemas/generated/manifest.ts';
import { architectureFor, type SamplingDefaults, type SourceTensors } from './architecture.ts';
import { CONTRACT_PATH } from '../contract.ts';
import { EVIDENCE_FILES, isServerCodeFile, MODEL_FILES, STARTUP_BUDGET, STARTUP_BUDGET_MD, submissionNames, WHEELS_LOCK, WHEELS_RECORD } from './layout.ts';
import { budgetMarkdown, readRates, startupBudget, submissionFacts } from './startup-budget.ts';
import type { StartupBudget } from '../../schemas/generated/startup-budget.ts';
import type { WheelsRecord } from '../../schemas/generated/wheels-record.ts';
import { linkOrCopy, listFiles } from '../../engine/files.ts';

/** Where each part comes from. */
export interface AssemblySources {
  /** Repository root (serve/serve.sh, python/ternforge_server/). */
  root: string;
  /** Committed outputs of the upstream stages, by name: fetch-model, pack, audit, vendor-wheels. */
  upstream: (stage: string) => string;
  /** The server's penalties for requests that name none (the emit profile section); none by default. */
  sampling?: SamplingDefaults;
  /** The source checkpoint's tensor list, recorded in architecture.json so `verify` checks coverage. */
  sourceTensors?: SourceTensors;
}


/** What assembly did. */
export interface AssemblyStats {
  files: number;
  linked: number;
  copied: number;
  written: number;
  bytes: number;
  /** Bytes that share an inode with the upstream outputs instead of being copied. */
  linkedBytes: number;
}


/** The file list a submission assembled from these sources must have, exactly. */
export function expectedFiles(src: AssemblySources, manifest: QuantizationManifest, wheelFiles: readonly string[], toolchainFiles: readonly string[] = []): string[] {
  const { SERVE_SH, REQUIREMENTS, MANIFEST, ARCHITECTURE, SERVER_DIR, SERVER_PACKAGE, CONTRACT, WHEELS_DIR, EVIDENCE_DIR, TOOLCHAIN_DIR } = submissionNames();
  const model = join(src.upstream('fetch-model'), 'model');
  const serverSrc = join(src.root, 'python', SERVER_PACKAGE);
  return [
    SERVE_SH,
    REQUIREMENTS,
    MANIFEST,
    ARCHITECTURE,
    ...listServerCode(serverSrc).map((f) => `${SERVER_DIR}/${SERVER_PACKAGE}/${f}`),
    `${SERVER_DIR}/${SERVER_PACKAGE}/${CONTRACT}`,
    ...MODEL_FILES.filter((m) => existsSync(join(model, m.name))).map((m) => m.name),
    ...manifest.shards.map((s) => s.file),
    ...wheelFiles.map((w) => `${WHEELS_DIR}/${w}`),
    ...toolchainFiles.map((f) => `${TOOLCHAIN_DIR}/${f}`),
    ...EVIDENCE_FILES.map((e) => `${EVIDENCE_DIR}/${e.name}`),
    `${EVIDENCE_DIR}/${STARTUP_BUDGET}`,
    `${EVIDENCE_DIR}/${STARTUP_BUDGET_MD}`,
  ].sort();
}

/** The server package's files, relative, without caches and bytecode. */
export function listServerCode(dir: string): string[] {
  const out: string[] = [];
  const walk = (d: string): void => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      if (!isServerCodeFile(e.name)) continue;
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.isFile()) out.push(relative(dir, p));
    }
  };
  walk(dir);
  return out.sort();
}

/**
 * Assemble into `out` (empty). The manifest passes its schema and its shards must be exactly the
 * files in pack's weights/; the result's file list is checked against `expectedFiles`.
 */
export function assembleSubmission(src: AssemblySources, out: string, schemas: SchemaSet): Result<{ stats: AssemblyStats; files: string[]; budget: StartupBudget }, AssemblyFailure> {
  const { SERVE_SH, REQUIREMENTS, MANIFEST, ARCHITECTURE, SERVER_DIR, SERVER_PACKAGE, CONTRACT, WEIGHTS_DIR, WHEELS_DIR, EVIDENCE_DIR, TOOLCHAIN_DIR } = submissionNames();
  const stats: AssemblyStats = { files: 0, linked: 0, copied: 0, written: 0, bytes: 0, linkedBytes: 0 };
  const need = (path: string, detail: string): AssemblyFailure | null => (existsSync(path) ? null : { reason: 'submission-input-missing', path, detail });
  const link = (from: string, to: string): void => {
    mkdirSync(join(to, '..'), { recursive: true });
    const size = statSync(from).size;
    if (linkOrCopy(from, to) === 'linked') {
      stats.linked++;
      stats.linkedBytes += size;
    } else stats.copied++;
    stats.files++;
    stats.bytes += size;
  };
  const copy = (from: string, to: string): void => {
    mkdirSync(join(to, '..'), { recursive: true });
    copyFileSync(from, to);
    stats.copied++;
    stats.files++;
    stats.bytes += statSync(from).size;
  };

  const fetchOut = src.upstream('fetch-model');
  const packOut = src.upstream('pack');
  const wheelsOut = src.upstream('vendor-wheels');
  const model = join(fetchOut, 'model');
  const serveSh = join(src.root, 'serve', 'serve.sh');
  const serverSrc = join(src.root, 'python', SERVER_PACKAGE);
  for (const [p, why] of [
    [serveSh, 'the offline entrypoint (serve/serve.sh)'],
    [serverSrc, 'the server package (python/ternforge_server/)'],
    [join(packOut, MANIFEST), "pack's manifest"],
    [join(wheelsOut, WHEELS_LOCK), "vendor-wheels' locked requirements"],
    [join(wheelsOut, WHEELS_DIR), "vendor-wheels' wheels/"],
    ...MODEL_FILES.filter((m) => m.required).map((m) => [join(model, m.name), `fetch-model's ${m.name}`] as const),
    ...EVIDENCE_FILES.map((e) => [join(src.upstream(e.stage), e.path), `${e.stage}'s ${e.path} (evidence)`] as const),
  ] as const) {
    const f = need(p, why);
    if (f !== null) return err(f);
  }

  // The manifest is the map of weights/: validated, and its shards are exactly pack's weights/.
  const manifestPath = join(packOut, MANIFEST);
  let manifestJson: unknown;
  try {
    manifestJson = JSON.parse(readFileSync(manifestPath, 'utf8'));
  } catch (e) {
    return err({ reason: 'submission-input-invalid', path: manifestPath, detail: `not JSON: ${(e as Error).message}` });
  }
  const errors = schemas.validate('manifest.schema.json', manifestJson);
  if (errors.length > 0) return err({ reason: 'submission-input-invalid', path: manifestPath, detail: errors.join('; ') });
  const manifest = manifestJson as QuantizationManifest;
  const packed = existsSync(join(packOut, WEIGHTS_DIR)) ? listFiles(join(packOut, WEIGHTS_DIR)).map((f) => `${WEIGHTS_DIR}/${f}`) : [];
  const shards = manifest.shards.map((s) => s.file).sort();
  if (JSON.stringify(packed) !== JSON.stringify(shards)) return err({ reason: 'submission-input-invalid', path: join(packOut, WEIGHTS_DIR), detail: `weights/ holds ${JSON.stringify(packed)}, the manifest lists ${JSON.stringify(shards)}` });
  const wheelFiles = listFiles(join(wheelsOut, WHEELS_DIR));
  const strays = wheelFiles.filter((w) => !w.endsWith('.whl') || w.includes('/'));
  if (strays.length > 0) return err({ reason: 'submission-input-invalid', path: join(wheelsOut, WHEELS_DIR), detail: `not wheels: ${strays.join(', ')}` });

  // From the repository: copied.
  copy(serveSh, join(out, SERVE_SH));
  chmodSync(join(out, SERVE_SH), 0o755);
  for (const f of listServerCode(serverSrc)) copy(join(serverSrc, f), join(out, SERVER_DIR, SERVER_PACKAGE, f));
  // The contract the server reads (exempt prefixes, packing, penalty range): the served box has only Python.
  copy(CONTRACT_PATH, join(out, SERVER_DIR, SERVER_PACKAGE, CONTRACT));
  // From upstream outputs: hard links.
  link(join(wheelsOut, WHEELS_LOCK), join(out, REQUIREMENTS));
  link(manifestPath, join(out, MANIFEST));
  for (const s of shards) link(join(packOut, s), join(out, s));
  for (const m of MODEL_FILES) if (existsSync(join(model, m.name))) link(join(model, m.name), join(out, m.name));
  for (const w of wheelFiles) link(join(wheelsOut, WHEELS_DIR, w), join(out, WHEELS_DIR, w));
  // The C toolchain's headers (vendor-wheels' python_headers), when it made them: regular files only.
  const toolchainFiles = existsSync(join(wheelsOut, TOOLCHAIN_DIR)) ? listFiles(join(wheelsOut, TOOLCHAIN_DIR)) : [];
  for (const f of toolchainFiles) link(join(wheelsOut, TOOLCHAIN_DIR, f), join(out, TOOLCHAIN_DIR, f));
  for (const e of EVIDENCE_FILES) link(join(src.upstream(e.stage), e.path), join(out, EVIDENCE_DIR, e.name));

  const arch = architectureFor(out, manifest, src.sampling, src.sourceTensors);
  if (!arch.ok) return arch;
  schemas.check('architecture.schema.json', arch.value, 'architecture.json');
  writeFileSync(join(out, ARCHITECTURE), prettyJson(arch.value));
  stats.files++;
  stats.written++;

  // The start-up budget of exactly this submission: its sizes times the rates measured in bench/.
  const wheelsRecordPath = join(wheelsOut, WHEELS_RECORD);
  const wheelsRead = readJsonFile<WheelsRecord>(wheelsRecordPath, schemas, 'wheels-record.schema.json');
  if (!wheelsRead.ok || wheelsRead.value === null) return err({ reason: 'submission-input-invalid', path: wheelsRecordPath, detail: wheelsRead.ok ? 'absent' : wheelsRead.error.reason === 'invalid-json' ? wheelsRead.error.errors.join('; ') : wheelsRead.error.reason });
  const wheelsRecord = wheelsRead.value;
  const budget = startupBudget(submissionFacts(manifest, wheelsRecord), readRates(src.root));
  schemas.check('startup-budget.schema.json', budget, 'the start-up budget');
  writeFileSync(join(out, EVIDENCE_DIR, STARTUP_BUDGET), prettyJson(budget));
  writeFileSync(join(out, EVIDENCE_DIR, STARTUP_BUDGET_MD), `# Start-up budget\n\n${budgetMarkdown(budget)}\n${budget.notes.map((n) => `- ${n}`).join('\n')}\n`);
  stats.files += 2;
  stats.written += 2;

  const files = listFiles(out);
  const want = expectedFiles(src, manifest, wheelFiles, toolchainFiles);
  if (JSON.stringify(files) !== JSON.stringify(want)) throw new Error(`assembled ${JSON.stringify(files)}, expected ${JSON.stringify(want)}`);
  return ok({ stats, files, budget });
}

