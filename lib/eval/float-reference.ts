/**
 * A directory the submission's own server serves the full-precision model from: fetch-model's checkpoint
 * (the weights the ternary model was made from) with every tensor `float`-encoded in a
 * `quantization_manifest.json`, the tokenizer and config files a submission takes from fetch-model, and the
 * submission's `architecture.json` when it has one (so the float model is served with the same sampling
 * defaults a user of the submission gets). The answer-retention figure compares the ternary submission with
 * this, through the same server code and the same requests.
 *
 * Shards are hard-linked (copied across file systems); nothing in `modelDir` is written.
 */
import { copyFileSync, existsSync, linkSync, mkdirSync, statSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { err, ok, type Result } from '../../engine/result.ts';
import { openCheckpoint } from '../safetensors/checkpoint.ts';
import { ARCHITECTURE, MANIFEST, MODEL_FILES, WEIGHTS_DIR } from '../submission/layout.ts';
import { sha256File } from '../submission/wheels.ts';

/** Manifest format the server's loader reads (python/ternforge_server/loader.py MANIFEST_FORMAT). */
const MANIFEST_FORMAT = 'ternforge-manifest/1';

/** Write the float reference of `modelDir` into `out` (created); returns `out`. */
export async function writeFloatReference(modelDir: string, submissionDir: string | null, out: string): Promise<Result<string, string>> {
  const ckpt = await openCheckpoint(modelDir);
  if (!ckpt.ok) return err(`float reference: ${ckpt.error.message}`);
  const tensors: Record<string, Record<string, unknown>> = {};
  const shards: Array<{ file: string; size: number; sha256: string }> = [];
  try {
    mkdirSync(join(out, WEIGHTS_DIR), { recursive: true });
    for (const file of ckpt.value.files) {
      const rel = `${WEIGHTS_DIR}/${basename(file)}`;
      const dst = join(out, rel);
      if (!existsSync(dst)) {
        try {
          linkSync(join(modelDir, file), dst);
        } catch {
          copyFileSync(join(modelDir, file), dst);
        }
      }
      shards.push({ file: rel, size: statSync(dst).size, sha256: await sha256File(dst) });
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
  const manifest = { format: MANIFEST_FORMAT, base_model: basename(modelDir), revision: 'fetch-model', method: 'none (float reference for answer retention)', packing: {}, shards, tensors };
  writeFileSync(join(out, MANIFEST), `${JSON.stringify(manifest, null, 2)}\n`);
  for (const { name, required } of MODEL_FILES) {
    if (existsSync(join(modelDir, name))) copyFileSync(join(modelDir, name), join(out, name));
    else if (required) return err(`float reference: ${join(modelDir, name)} is missing`);
  }
  if (submissionDir !== null && existsSync(join(submissionDir, ARCHITECTURE))) copyFileSync(join(submissionDir, ARCHITECTURE), join(out, ARCHITECTURE));
  return ok(out);
}
