/**
 * A strict, streaming safetensors reader. `openSafetensors` reads only the 8-byte length and the header
 * through a file handle and validates them (see header.ts); tensor bytes are read on demand, one byte range
 * at a time, so a multi-GB file is never loaded whole.
 */
import { open, type FileHandle } from 'node:fs/promises';
import { err, ok, type Result } from '../../engine/result.ts';
import { checkHeaderLength, parseHeader, type Header, type TensorInfo } from './header.ts';
import { SafetensorsError } from './errors.ts';

/** Default chunk size of `streamTensor`. */
export const DEFAULT_CHUNK_BYTES = 8 << 20;

/** An open, validated safetensors file. Construct it with `openSafetensors`; `close()` it when done. */
export class SafetensorsFile {
  readonly path: string;
  readonly size: number;
  readonly headerLength: number;
  /** Absolute offset of the data section (8 + headerLength). */
  readonly dataStart: number;
  readonly metadata: Readonly<Record<string, string>> | null;
  /** Tensors in offset order. */
  readonly tensors: readonly TensorInfo[];
  readonly #handle: FileHandle;
  readonly #byName: ReadonlyMap<string, TensorInfo>;

  private constructor(path: string, size: number, handle: FileHandle, header: Header) {
    this.path = path;
    this.size = size;
    this.#handle = handle;
    this.headerLength = header.headerLength;
    this.dataStart = header.dataStart;
    this.metadata = header.metadata;
    this.tensors = header.tensors;
    this.#byName = new Map(this.tensors.map((t) => [t.name, t]));
  }

  /** Opens and validates a file; the handle stays open until `close()`. */
  static async open(path: string): Promise<Result<SafetensorsFile, SafetensorsError>> {
    let handle: FileHandle;
    try {
      handle = await open(path, 'r');
    } catch (e) {
      return err(new SafetensorsError({ reason: 'io-error', file: path, detail: (e as Error).message }));
    }
    try {
      const size = (await handle.stat()).size;
      const prefix = Buffer.alloc(Math.min(8, size));
      await readFully(handle, prefix, 0);
      const n = checkHeaderLength(path, size, prefix);
      if (!n.ok) {
        await handle.close();
        return n;
      }
      const bytes = Buffer.alloc(n.value);
      await readFully(handle, bytes, 8);
      const header = parseHeader(path, bytes, size);
      if (!header.ok) {
        await handle.close();
        return header;
      }
      return ok(new SafetensorsFile(path, size, handle, header.value));
    } catch (e) {
      await handle.close().catch(() => undefined);
      return err(new SafetensorsError({ reason: 'io-error', file: path, detail: (e as Error).message }));
    }
  }

  /** Tensor names in offset order. */
  names(): string[] {
    return this.tensors.map((t) => t.name);
  }

  has(name: string): boolean {
    return this.#byName.has(name);
  }

  /** The tensor's entry, or undefined. */
  get(name: string): TensorInfo | undefined {
    return this.#byName.get(name);
  }

  /** The tensor's entry, or an `unknown-tensor` error. */
  info(name: string): Result<TensorInfo, SafetensorsError> {
    const t = this.#byName.get(name);
    return t ? ok(t) : err(new SafetensorsError({ reason: 'unknown-tensor', file: this.path, tensor: name }));
  }

  /** Absolute file offsets [begin, end) of a tensor's bytes. */
  absoluteRange(t: TensorInfo): [number, number] {
    return [this.dataStart + t.begin, this.dataStart + t.end];
  }

  /** One tensor's bytes (a fresh Buffer). Throws `unknown-tensor` for a name the file lacks. */
  async readTensor(name: string): Promise<Buffer> {
    const t = this.#require(name);
    const buf = Buffer.allocUnsafe(t.end - t.begin);
    await readFully(this.#handle, buf, this.dataStart + t.begin);
    return buf;
  }

  /** One tensor's bytes in chunks of at most `chunkBytes` (each a fresh Buffer), reading only its range. */
  async *streamTensor(name: string, chunkBytes: number = DEFAULT_CHUNK_BYTES): AsyncGenerator<Buffer> {
    const t = this.#require(name);
    if (!(chunkBytes > 0)) throw new RangeError(`chunkBytes must be positive, got ${chunkBytes}`);
    for (let pos = t.begin; pos < t.end; pos += chunkBytes) {
      const buf = Buffer.allocUnsafe(Math.min(chunkBytes, t.end - pos));
      await readFully(this.#handle, buf, this.dataStart + pos);
      yield buf;
    }
  }

  async close(): Promise<void> {
    await this.#handle.close();
  }

  #require(name: string): TensorInfo {
    const t = this.#byName.get(name);
    if (!t) throw new SafetensorsError({ reason: 'unknown-tensor', file: this.path, tensor: name });
    return t;
  }
}

/** Opens and validates a safetensors file (see SafetensorsFile.open). */
export function openSafetensors(path: string): Promise<Result<SafetensorsFile, SafetensorsError>> {
  return SafetensorsFile.open(path);
}

/** Reads buf.length bytes at `position`; a short read (the file shrank under us) throws. */
async function readFully(handle: FileHandle, buf: Uint8Array, position: number): Promise<void> {
  let done = 0;
  while (done < buf.length) {
    const { bytesRead } = await handle.read(buf, done, buf.length - done, position + done);
    if (bytesRead === 0) throw new Error(`unexpected end of file at byte ${position + done}`);
    done += bytesRead;
  }
}
