/**
 * The source checkpoint as the audit sees it: its own tensor list (names, shapes, dtypes) from its index or
 * single file's header, and whether it ties the embedding and the head (config.json). Nothing here comes
 * from the submission. A `SourceDescription` can also be built by hand ("header only"), e.g. for the real
 * Qwen3.5-4B shapes in tests.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { err, ok, type Result } from '../../engine/result.ts';
import { contract, isEmbeddingOrHead, isExemptName } from '../contract.ts';
import type { SourceFailure } from '../failures.ts';
import { openCheckpoint } from '../safetensors/checkpoint.ts';

export interface SourceTensor {
  name: string;
  shape: number[];
  dtype: string;
}

export interface SourceDescription {
  /** Where it came from (a directory, or a description's origin). */
  origin: string;
  tensors: SourceTensor[];
  /** config.json's tie_word_embeddings (top level or text_config); null when absent. */
  tieWordEmbeddings: boolean | null;
}

// Exempt prefixes (vision tower, MTP head), the text model's prefix, the head and embedding names: schemas/contract.json.
export { isEmbeddingOrHead, isExemptName } from '../contract.ts';

/**
 * Which names belong to the text model: with a `model.language_model.` prefix in the source, those plus the
 * head; without it (Llama-style), everything not exempt.
 */
export function textModelFilter(names: Iterable<string>): (name: string) => boolean {
  const { text_prefix: textPrefix, output_head: head } = contract().tensors;
  const multimodal = [...names].some((n) => n.startsWith(textPrefix));
  return (name) => !isExemptName(name) && (!multimodal || name.startsWith(textPrefix) || name === head);
}

/** The gates' audited set of a source: text-model tensors minus the input embedding and the output head. */
export function auditedSourceTensors(source: SourceDescription): SourceTensor[] {
  const isText = textModelFilter(source.tensors.map((t) => t.name));
  return source.tensors.filter((t) => isText(t.name) && !isEmbeddingOrHead(t.name));
}


/** Reads a checkpoint directory's tensor list (headers only) and config.json. */
export async function loadSourceCheckpoint(dir: string): Promise<Result<SourceDescription, SourceFailure>> {
  let tie: boolean | null = null;
  const configPath = join(dir, 'config.json');
  try {
    const config = JSON.parse(await readFile(configPath, 'utf8')) as Record<string, unknown>;
    const text = config['text_config'] as Record<string, unknown> | undefined;
    const value = config['tie_word_embeddings'] ?? text?.['tie_word_embeddings'];
    if (typeof value === 'boolean') tie = value;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') return err({ reason: 'invalid-source-config', path: configPath, detail: (e as Error).message });
  }
  const ckpt = await openCheckpoint(dir);
  if (!ckpt.ok) return err({ reason: 'invalid-source-checkpoint', dir, error: ckpt.error.toJSON() });
  const tensors = [...ckpt.value.tensors.values()].map(({ info }) => ({ name: info.name, shape: [...info.shape], dtype: info.dtype }));
  await ckpt.value.close();
  tensors.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  return ok({ origin: dir, tensors, tieWordEmbeddings: tie });
}

/**
 * A header-only description embedded in a submission's architecture.json:
 * `{"source_tensors": {"<name>": {"shape": [...], "dtype": "BF16"}, ...}, "tie_word_embeddings": true}`.
 * Returns null when the file or the field is absent.
 */
export async function loadArchitectureSource(path: string): Promise<Result<SourceDescription | null, SourceFailure>> {
  let json: Record<string, unknown>;
  try {
    json = JSON.parse(await readFile(path, 'utf8')) as Record<string, unknown>;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return ok(null);
    return err({ reason: 'invalid-source-config', path, detail: (e as Error).message });
  }
  const raw = json['source_tensors'];
  if (raw === undefined) return ok(null);
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) return err({ reason: 'invalid-source-config', path, detail: 'source_tensors must be an object of {shape, dtype}' });
  const tensors: SourceTensor[] = [];
  for (const [name, t] of Object.entries(raw as Record<string, unknown>)) {
    const { shape, dtype } = (t ?? {}) as { shape?: unknown; dtype?: unknown };
    if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0) || typeof dtype !== 'string') {
      return err({ reason: 'invalid-source-config', path, detail: `source_tensors[${JSON.stringify(name)}] must be {shape: int[], dtype: string}` });
    }
    tensors.push({ name, shape: shape as number[], dtype });
  }
  // Top-level, else the text model's summary emit writes (model.text.tie_word_embeddings).
  const text = ((json['model'] as Record<string, unknown> | undefined)?.['text'] ?? {}) as Record<string, unknown>;
  const tie = json['tie_word_embeddings'] ?? text['tie_word_embeddings'];
  return ok({ origin: path, tensors, tieWordEmbeddings: typeof tie === 'boolean' ? tie : null });
}
