/**
 * A streaming safetensors writer that produces the same bytes as the Python/Rust `safetensors` library:
 * tensors sorted by dtype rank (largest first, see dtypes.ts) then by name (bytewise UTF-8), laid out back to
 * back in that order; compact JSON header with `__metadata__` first (keys sorted), padded with spaces to a
 * multiple of 8 bytes. Data may be a buffer or a lazy chunk source, so a multi-GB shard never sits in memory
 * whole. The file is written to a temporary name beside the target and renamed into place; on any error the
 * temporary file is removed and the error rethrown.
 */
import { createHash } from 'node:crypto';
import { open, rename, rm } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { DTYPES, byteSize, isDtype, type Dtype } from './dtypes.ts';

/** A tensor to write. `data` is its bytes, or a function returning its chunks (called once, when its turn comes). */
export interface WriteEntry {
  name: string;
  dtype: Dtype;
  shape: readonly number[];
  data: Uint8Array | (() => AsyncIterable<Uint8Array> | Iterable<Uint8Array>);
}

export interface WriteResult {
  path: string;
  /** File size in bytes. */
  size: number;
  /** sha256 of the whole file, lowercase hex, computed while writing. */
  sha256: string;
  /** Tensor names in the order their data was written. */
  order: string[];
}

const encoder = new TextEncoder();

/** The sort the reference library applies: dtype rank descending, then name ascending (bytewise). */
export function compareForLayout(a: { name: string; dtype: Dtype }, b: { name: string; dtype: Dtype }): number {
  const r = DTYPES[b.dtype].rank - DTYPES[a.dtype].rank;
  return r !== 0 ? r : Buffer.compare(Buffer.from(a.name, 'utf8'), Buffer.from(b.name, 'utf8'));
}

/** The header bytes (without the 8-byte length) for entries already in layout order. */
export function encodeHeader(entries: ReadonlyArray<Pick<WriteEntry, 'name' | 'dtype' | 'shape'>>, metadata?: Readonly<Record<string, string>>): Uint8Array {
  const parts: string[] = [];
  if (metadata !== undefined) {
    const keys = Object.keys(metadata).sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
    parts.push(`"__metadata__":{${keys.map((k) => `${JSON.stringify(k)}:${JSON.stringify(metadata[k])}`).join(',')}}`);
  }
  let offset = 0;
  for (const e of entries) {
    const size = byteSize(e.dtype, e.shape);
    parts.push(`${JSON.stringify(e.name)}:{"dtype":"${e.dtype}","shape":[${e.shape.join(',')}],"data_offsets":[${offset},${offset + size}]}`);
    offset += size;
  }
  const json = encoder.encode(`{${parts.join(',')}}`);
  const padded = new Uint8Array(json.length + ((8 - (json.length % 8)) % 8)).fill(0x20);
  padded.set(json);
  return padded;
}

/** Writes a safetensors file. Throws (after removing its temporary file) on invalid entries or a failing source. */
export async function writeSafetensors(path: string, entries: readonly WriteEntry[], options: { metadata?: Readonly<Record<string, string>> } = {}): Promise<WriteResult> {
  const seen = new Set<string>();
  for (const e of entries) {
    if (e.name === '__metadata__') throw new Error('writeSafetensors: "__metadata__" is not a tensor name');
    if (seen.has(e.name)) throw new Error(`writeSafetensors: duplicate tensor ${JSON.stringify(e.name)}`);
    seen.add(e.name);
    if (!isDtype(e.dtype)) throw new Error(`writeSafetensors: unknown dtype ${String(e.dtype)} for ${e.name}`);
    if (!e.shape.every((d) => Number.isSafeInteger(d) && d >= 0)) throw new Error(`writeSafetensors: bad shape ${JSON.stringify(e.shape)} for ${e.name}`);
  }
  const ordered = [...entries].sort(compareForLayout);
  const header = encodeHeader(ordered, options.metadata);
  const prefix = Buffer.alloc(8);
  prefix.writeBigUInt64LE(BigInt(header.length));

  const tmp = join(dirname(path), `.${basename(path)}.tmp-${process.pid}-${Math.random().toString(36).slice(2)}`);
  const hash = createHash('sha256');
  const handle = await open(tmp, 'wx');
  let size = 0;
  const write = async (chunk: Uint8Array): Promise<void> => {
    if (chunk.length === 0) return;
    hash.update(chunk);
    let done = 0;
    while (done < chunk.length) {
      const { bytesWritten } = await handle.write(chunk, done, chunk.length - done);
      done += bytesWritten;
    }
    size += chunk.length;
  };
  try {
    await write(prefix);
    await write(header);
    for (const e of ordered) {
      const expected = byteSize(e.dtype, e.shape);
      let got = 0;
      if (e.data instanceof Uint8Array) {
        got = e.data.length;
        if (got === expected) await write(e.data);
      } else {
        for await (const chunk of e.data()) {
          got += chunk.length;
          if (got > expected) break;
          await write(chunk);
        }
      }
      if (got !== expected) {
        throw new Error(`writeSafetensors: tensor ${JSON.stringify(e.name)} (${e.dtype} ${JSON.stringify(e.shape)}) needs ${expected} bytes, its data gave ${got}${got > expected ? '+' : ''}`);
      }
    }
    await handle.close();
    await rename(tmp, path);
  } catch (e) {
    await handle.close().catch(() => undefined);
    await rm(tmp, { force: true });
    throw e;
  }
  return { path, size, sha256: hash.digest('hex'), order: ordered.map((e) => e.name) };
}
