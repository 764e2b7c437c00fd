/**
 * A checkpoint directory: `model.safetensors.index.json` (Hugging Face sharded layout: {weight_map: {tensor:
 * file}}) with its shards, or a single `model.safetensors`. Every file is opened with the strict reader; the
 * index must name existing files, each tensor must be in the file the index says, and every tensor a file
 * holds must be listed there.
 */
import { readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { err, ok, type Result } from '../../engine/result.ts';
import { SafetensorsError } from './errors.ts';
import type { TensorInfo } from './header.ts';
import { SafetensorsFile } from './reader.ts';

export const INDEX_FILE = 'model.safetensors.index.json';
export const SINGLE_FILE = 'model.safetensors';

export interface CheckpointTensor {
  /** File name relative to the checkpoint directory. */
  readonly file: string;
  readonly info: TensorInfo;
}

/** An open checkpoint; `close()` closes every file. */
export interface Checkpoint {
  readonly dir: string;
  /** File names relative to `dir`, sorted. */
  readonly files: readonly string[];
  /** Every tensor by name. */
  readonly tensors: ReadonlyMap<string, CheckpointTensor>;
  /** The open file by relative name. */
  file(name: string): SafetensorsFile;
  readTensor(name: string): Promise<Buffer>;
  streamTensor(name: string, chunkBytes?: number): AsyncGenerator<Buffer>;
  close(): Promise<void>;
}

/** Opens a checkpoint directory (index or single file). */
export async function openCheckpoint(dir: string): Promise<Result<Checkpoint, SafetensorsError>> {
  const indexPath = join(dir, INDEX_FILE);
  if (await exists(indexPath)) return openIndexed(dir, indexPath);
  if (await exists(join(dir, SINGLE_FILE))) return openFiles(dir, [SINGLE_FILE], null);
  return err(new SafetensorsError({ reason: 'no-checkpoint', file: dir, expected: `${INDEX_FILE} or ${SINGLE_FILE}` }));
}

/** Opens an explicit list of files (relative to `dir`) as one checkpoint; tensor names must be unique. */
export async function openFiles(dir: string, files: readonly string[], weightMap: ReadonlyMap<string, string> | null): Promise<Result<Checkpoint, SafetensorsError>> {
  const open = new Map<string, SafetensorsFile>();
  const closeAll = async (): Promise<void> => {
    await Promise.all([...open.values()].map((f) => f.close()));
  };
  const tensors = new Map<string, CheckpointTensor>();
  for (const name of [...files].sort()) {
    const path = join(dir, name);
    if (!(await exists(path))) {
      await closeAll();
      return err(new SafetensorsError({ reason: 'index-file-missing', file: path }));
    }
    const f = await SafetensorsFile.open(path);
    if (!f.ok) {
      await closeAll();
      return f;
    }
    open.set(name, f.value);
    for (const info of f.value.tensors) {
      const prior = tensors.get(info.name);
      if (prior) {
        await closeAll();
        return err(new SafetensorsError({ reason: 'duplicate-tensor', file: path, tensor: info.name, expected: 'one file', actual: `${prior.file} and ${name}` }));
      }
      if (weightMap !== null && weightMap.get(info.name) !== name) {
        await closeAll();
        return err(new SafetensorsError({ reason: 'index-tensor-unlisted', file: path, tensor: info.name, expected: weightMap.get(info.name) ?? 'listed in the index', actual: name }));
      }
      tensors.set(info.name, { file: name, info });
    }
  }
  if (weightMap !== null) {
    for (const [tensor, file] of [...weightMap].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
      if (!tensors.has(tensor)) {
        await closeAll();
        return err(new SafetensorsError({ reason: 'index-tensor-missing', file: join(dir, file), tensor, expected: 'present', actual: 'absent' }));
      }
    }
  }
  const fileOf = (tensor: string): SafetensorsFile => {
    const t = tensors.get(tensor);
    if (!t) throw new SafetensorsError({ reason: 'unknown-tensor', file: dir, tensor });
    return open.get(t.file)!;
  };
  return ok({
    dir,
    files: [...open.keys()],
    tensors,
    file(name) {
      const f = open.get(name);
      if (!f) throw new Error(`checkpoint ${dir} has no file ${name}`);
      return f;
    },
    readTensor: (name) => fileOf(name).readTensor(name),
    streamTensor: (name, chunkBytes) => fileOf(name).streamTensor(name, chunkBytes),
    close: closeAll,
  });
}

async function openIndexed(dir: string, indexPath: string): Promise<Result<Checkpoint, SafetensorsError>> {
  let json: unknown;
  try {
    json = JSON.parse(await readFile(indexPath, 'utf8'));
  } catch (e) {
    return err(new SafetensorsError({ reason: 'invalid-index', file: indexPath, detail: (e as Error).message }));
  }
  const map = typeof json === 'object' && json !== null ? (json as Record<string, unknown>)['weight_map'] : undefined;
  if (typeof map !== 'object' || map === null || Array.isArray(map)) {
    return err(new SafetensorsError({ reason: 'invalid-index', file: indexPath, expected: '{"weight_map": {tensor: file}}', actual: 'no weight_map object' }));
  }
  const weightMap = new Map<string, string>();
  for (const [tensor, file] of Object.entries(map)) {
    if (typeof file !== 'string' || file.includes('/') || file.includes('\\') || !file.endsWith('.safetensors')) {
      return err(new SafetensorsError({ reason: 'invalid-index', file: indexPath, tensor, expected: 'a .safetensors file name in the same directory', actual: JSON.stringify(file) }));
    }
    weightMap.set(tensor, file);
  }
  return openFiles(dir, [...new Set(weightMap.values())], weightMap);
}

async function exists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch {
    return false;
  }
}
