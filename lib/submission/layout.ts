/**
 * The submission directory's layout (DESIGN.md section 2), written once. emit assembles exactly this,
 * smoke-serve and the tests read it from here.
 *
 *   serve.sh                       offline entrypoint (from serve/serve.sh)
 *   server/ternforge_server/       server code (from python/ternforge_server/, no __pycache__)
 *   server/ternforge_server/contract.json   schemas/contract.json, which the server reads at start-up
 *   requirements-serve.txt         the locked serving requirements (vendor-wheels' lock)
 *   quantization_manifest.json     from pack
 *   weights/*.safetensors          from pack
 *   architecture.json              written by emit (schemas/architecture.schema.json)
 *   config.json, generation_config.json, tokenizer files, chat template   from fetch-model's model/
 *   wheels/*.whl                   from vendor-wheels
 *   evidence/audit.json, evidence/source.json, evidence/wheels.json
 *   evidence/startup-budget.json, .md   written by emit (lib/submission/startup-budget.ts)
 *   toolchain/include/, toolchain/toolchain.json   the target CPython's headers, from vendor-wheels when the
 *                                  profile sets python_headers (lib/submission/python-headers.ts)
 */

import { contract } from '../contract.ts';

/**
 * The submission's file names, from schemas/contract.json (the server reads the same ones):
 *   SERVE_SH        entrypoint, at the root
 *   SERVER_DIR      where the server package lives (serve.sh puts `server/` on PYTHONPATH)
 *   SERVER_PACKAGE  the server's Python package name
 *   CONTRACT        schemas/contract.json's copy inside the server package, which the served box reads
 *   REQUIREMENTS    the locked requirements serve.sh installs, at the root
 *   MANIFEST, ARCHITECTURE, WEIGHTS_DIR, WHEELS_DIR, EVIDENCE_DIR
 *   TOOLCHAIN_DIR   the C toolchain's non-wheel pieces (present only when vendor-wheels made them)
 */
export function submissionNames(): {
  SERVE_SH: string; SERVER_DIR: string; SERVER_PACKAGE: string; CONTRACT: string; REQUIREMENTS: string;
  MANIFEST: string; ARCHITECTURE: string; WEIGHTS_DIR: string; WHEELS_DIR: string; EVIDENCE_DIR: string; TOOLCHAIN_DIR: string;
} {
  const s = contract().submission;
  return {
    SERVE_SH: s.entrypoint, SERVER_DIR: s.server_dir, SERVER_PACKAGE: s.server_package, CONTRACT: s.contract,
    REQUIREMENTS: s.requirements, MANIFEST: s.manifest, ARCHITECTURE: s.architecture, WEIGHTS_DIR: s.weights_dir,
    WHEELS_DIR: s.wheels_dir, EVIDENCE_DIR: s.evidence_dir, TOOLCHAIN_DIR: s.toolchain_dir,
  };
}

/** vendor-wheels' own outputs. */
export const WHEELS_LOCK = 'requirements-serve.lock.txt';
export const WHEELS_RECORD = 'wheels.json';
/**
 * Whether the shipped lock carries `--hash=sha256:` per pin, so serve.sh's pip installs in hash-checking
 * mode (a swapped wheel refuses to install). The sha256 of every wheel is also in evidence/wheels.json.
 */
export const LOCK_WITH_HASHES = true;

/**
 * Files taken from fetch-model's `model/` when present: config, tokenizer and chat template, never
 * float weights or their index. `required` ones must exist.
 */
export const MODEL_FILES: ReadonlyArray<{ name: string; required: boolean }> = [
  { name: 'config.json', required: true },
  { name: 'generation_config.json', required: false },
  { name: 'tokenizer.json', required: true },
  { name: 'tokenizer_config.json', required: true },
  { name: 'chat_template.jinja', required: false },
  { name: 'chat_template.json', required: false },
  { name: 'special_tokens_map.json', required: false },
  { name: 'added_tokens.json', required: false },
  { name: 'vocab.json', required: false },
  { name: 'merges.txt', required: false },
];

/** evidence/ as emit writes it: name in evidence/ <- (upstream stage, path in its outputs). */
export const EVIDENCE_FILES: ReadonlyArray<{ name: string; stage: string; path: string }> = [
  { name: 'audit.json', stage: 'audit', path: 'audit.json' },
  { name: 'source.json', stage: 'fetch-model', path: 'source.json' },
  { name: 'wheels.json', stage: 'vendor-wheels', path: WHEELS_RECORD },
];

/** The start-up budget emit writes into evidence/ (JSON and the same as a Markdown table). */
export const STARTUP_BUDGET = 'startup-budget.json';
export const STARTUP_BUDGET_MD = 'startup-budget.md';

/** Names never copied with the server code. */
export const SERVER_CODE_EXCLUDED = ['__pycache__', '.pytest_cache'];
export function isServerCodeFile(name: string): boolean {
  return !SERVER_CODE_EXCLUDED.includes(name) && !name.endsWith('.pyc') && !name.endsWith('.pyo');
}
