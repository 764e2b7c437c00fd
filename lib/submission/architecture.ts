/**
 * architecture.json (schemas/architecture.schema.json): a summary of config.json, the packing
 * convention, the base model and revision, and pointers into evidence/, derived only from files in the
 * assembled submission (so a reviewer can recompute it from them).
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { sha256 } from '../../engine/digest.ts';
import { err, ok, type Result } from '../../engine/result.ts';
import type { Architecture, FileRef } from '../../schemas/generated/architecture.ts';
import type { QuantizationManifest } from '../../schemas/generated/manifest.ts';
import type { AssemblyFailure } from '../failures.ts';
import { EVIDENCE_FILES, MODEL_FILES, submissionNames } from './layout.ts';

type Json = Record<string, unknown>;

/** The server's penalties for requests that name none (architecture.json `serving.sampling_defaults`). */
export type SamplingDefaults = Architecture['serving']['sampling_defaults'];
export const NO_PENALTIES: SamplingDefaults = { presence_penalty: 0, frequency_penalty: 0 };

function int(cfg: Json, key: string): number | undefined {
  const v = cfg[key];
  return typeof v === 'number' && Number.isInteger(v) ? v : undefined;
}

/** Files that are the tokenizer (everything of MODEL_FILES but config, generation config and template). */
const TOKENIZER_FILES = MODEL_FILES.map((m) => m.name).filter((n) => !['config.json', 'generation_config.json', 'chat_template.jinja', 'chat_template.json'].includes(n));

/** The source checkpoint's tensors by name (headers only), recorded as architecture.json `source_tensors`. */
export type SourceTensors = Record<string, { shape: number[]; dtype: string }>;

export function architectureFor(dir: string, manifest: QuantizationManifest, sampling: SamplingDefaults = NO_PENALTIES, sourceTensors?: SourceTensors): Result<Architecture, AssemblyFailure> {
  const { EVIDENCE_DIR, MANIFEST, REQUIREMENTS, SERVE_SH, SERVER_DIR, SERVER_PACKAGE, WHEELS_DIR } = submissionNames();
  const configPath = join(dir, 'config.json');
  let config: Json;
  try {
    config = JSON.parse(readFileSync(configPath, 'utf8')) as Json;
  } catch (e) {
    return err({ reason: 'submission-input-invalid', path: configPath, detail: `not JSON: ${(e as Error).message}` });
  }
  const text = (typeof config.text_config === 'object' && config.text_config !== null ? config.text_config : config) as Json;
  const layers = int(text, 'num_hidden_layers');
  const missing = ['num_hidden_layers', 'hidden_size', 'intermediate_size', 'num_attention_heads', 'vocab_size'].filter((k) => int(text, k) === undefined);
  if (missing.length > 0 || layers === undefined) return err({ reason: 'submission-input-invalid', path: configPath, detail: `the text config lacks ${missing.join(', ')}` });
  const layerTypes = Array.isArray(text.layer_types) ? (text.layer_types as unknown[]).map(String) : Array<string>(layers).fill('full_attention');
  if (layerTypes.length !== layers) return err({ reason: 'submission-input-invalid', path: configPath, detail: `layer_types has ${layerTypes.length} entries for ${layers} layers` });
  const counts: Record<string, number> = {};
  for (const t of layerTypes) counts[t] = (counts[t] ?? 0) + 1;
  const tie = text.tie_word_embeddings ?? config.tie_word_embeddings ?? false;

  const tensors = Object.values(manifest.tensors);
  const numel = (shape: number[]): number => shape.reduce((a, b) => a * b, 1);
  const live = tensors.filter((t) => t.exempt !== true);
  const groupSizes = [...new Set(tensors.filter((t) => t.encoding === 'packed_2bit' && t.group_size !== undefined).map((t) => t.group_size!))].sort((a, b) => a - b);
  const ref = (f: string): FileRef => fileRef(dir, f);
  const present = (f: string): boolean => existsSync(join(dir, f));

  const arch: Architecture = {
    format: 'ternforge-architecture/1',
    base_model: { id: manifest.base_model, revision: manifest.revision },
    model: {
      model_type: String(config.model_type ?? text.model_type ?? 'unknown'),
      architectures: Array.isArray(config.architectures) ? (config.architectures as unknown[]).map(String) : [],
      text: {
        model_type: String(text.model_type ?? config.model_type ?? 'unknown'),
        num_hidden_layers: layers,
        hidden_size: int(text, 'hidden_size')!,
        intermediate_size: int(text, 'intermediate_size')!,
        num_attention_heads: int(text, 'num_attention_heads')!,
        num_key_value_heads: int(text, 'num_key_value_heads') ?? int(text, 'num_attention_heads')!,
        ...(int(text, 'head_dim') !== undefined ? { head_dim: int(text, 'head_dim')! } : {}),
        vocab_size: int(text, 'vocab_size')!,
        ...(int(text, 'max_position_embeddings') !== undefined ? { max_position_embeddings: int(text, 'max_position_embeddings')! } : {}),
        layer_types: layerTypes,
        layer_type_counts: counts,
        tie_word_embeddings: tie === true,
      },
      vision_tower: typeof config.vision_config === 'object' && config.vision_config !== null,
      mtp_layers: int(text, 'mtp_num_hidden_layers') ?? 0,
    },
    packing: { method: manifest.method, convention: { ...manifest.packing }, group_sizes: groupSizes },
    tensors: {
      total: tensors.length,
      packed_2bit: tensors.filter((t) => t.encoding === 'packed_2bit').length,
      float: tensors.filter((t) => t.encoding === 'float').length,
      exempt: tensors.filter((t) => t.exempt === true).length,
      tied: tensors.filter((t) => (t.tied_to?.length ?? 0) > 0).length,
      packed_2bit_parameters: live.filter((t) => t.encoding === 'packed_2bit').reduce((s, t) => s + numel(t.shape), 0),
      float_parameters: live.filter((t) => t.encoding === 'float').reduce((s, t) => s + numel(t.shape), 0),
    },
    ...(sourceTensors !== undefined ? { source_tensors: sourceTensors } : {}),
    serving: { entrypoint: SERVE_SH, server: `${SERVER_DIR}/${SERVER_PACKAGE}`, requirements: REQUIREMENTS, wheels: `${WHEELS_DIR}/`, text_only: true, sampling_defaults: { ...sampling } },
    files: {
      manifest: ref(MANIFEST),
      config: ref('config.json'),
      ...(present('generation_config.json') ? { generation_config: ref('generation_config.json') } : {}),
      ...(present('chat_template.jinja') ? { chat_template: ref('chat_template.jinja') } : present('chat_template.json') ? { chat_template: ref('chat_template.json') } : {}),
      tokenizer: TOKENIZER_FILES.filter(present).map(ref),
      // Weights are referenced as the manifest records them (the audit verified those bytes); not rehashed.
      weights: manifest.shards.map((s) => ({ file: s.file, size: s.size, sha256: s.sha256 })),
    },
    evidence: Object.fromEntries(EVIDENCE_FILES.map((e) => [e.name.replace(/\.json$/, ''), `${EVIDENCE_DIR}/${e.name}`])),
  };
  return ok(arch);
}

/** sha256 and size of a small submission file (not weights: the manifest records theirs), for architecture.json. */
export function fileRef(root: string, file: string): { file: string; size: number; sha256: string } {
  const bytes = readFileSync(join(root, file));
  return { file, size: bytes.length, sha256: sha256(bytes) };
}
