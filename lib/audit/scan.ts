/**
 * One pass over each shard's bytes: its sha256, and a scan of its packed-code byte ranges for the invalid
 * code 3. A thread reads the file in chunks small enough to stay in its core's cache, hashes each chunk and
 * tests the code bytes in it with a WebAssembly SIMD test (scan.wat) while they are still there, so the
 * scan costs a few percent over the sha256 itself. Several shards go to several threads (up to one a
 * core). Independent of lib/pack: the code test is its own (scan.wat, scan-worker.mjs).
 */
import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';
import { WASM_BYTES } from './scan.wasm.ts';

/** A byte range [begin, end) of the file holding packed codes, named for the report. */
export interface CodeRange {
  tensor: string;
  begin: number;
  end: number;
}

export interface InvalidCode {
  tensor: string;
  /** Byte index within the tensor's codes. */
  byte: number;
  value: number;
}

export interface ShardScan {
  size: number;
  sha256: string;
  /** Bytes of packed codes scanned. */
  codeBytes: number;
  /** The first invalid code byte of each tensor that has one. */
  invalid: InvalidCode[];
}

type Reply = { id: number; error?: string; sha256: string; size: number; invalid: InvalidCode[] };

let scanModule: WebAssembly.Module | undefined;

/** One worker thread running one shard at a time. */
class ScanThread {
  readonly #worker: Worker;
  readonly #waiting = new Map<number, { resolve: (r: Reply) => void; reject: (e: Error) => void }>();
  #failed: Error | null = null;
  #nextId = 0;

  constructor(module: WebAssembly.Module) {
    this.#worker = new Worker(new URL('./scan-worker.mjs', import.meta.url), { workerData: { module } });
    this.#worker.on('message', (m: Reply) => {
      const w = this.#waiting.get(m.id);
      this.#waiting.delete(m.id);
      if (m.error !== undefined) w?.reject(new Error(m.error));
      else w?.resolve(m);
    });
    const fail = (e: Error): void => {
      this.#failed = e;
      for (const w of this.#waiting.values()) w.reject(e);
      this.#waiting.clear();
    };
    this.#worker.on('error', fail);
    this.#worker.on('exit', (code) => fail(new Error(`audit scanner thread exited (code ${code})`)));
  }

  run(path: string, ranges: readonly CodeRange[]): Promise<Reply> {
    return new Promise((resolve, reject) => {
      if (this.#failed) return reject(this.#failed);
      const id = this.#nextId++;
      this.#waiting.set(id, { resolve, reject });
      this.#worker.postMessage({ id, path, ranges });
    });
  }

  async close(): Promise<void> {
    this.#worker.removeAllListeners('exit');
    await this.#worker.terminate();
  }
}

/** Up to one scanning thread a core, started as shards arrive; reuse for several files, then `close()`. */
export class ShardScanner {
  readonly #max: number;
  readonly #idle: ScanThread[] = [];
  readonly #all: ScanThread[] = [];
  readonly #queue: Array<(t: ScanThread) => void> = [];

  constructor(threads = availableParallelism()) {
    this.#max = Math.max(1, threads);
  }

  /** Hashes the whole file and scans `ranges` (sorted or not, non-overlapping, within the file) for code 3. */
  async scan(path: string, ranges: readonly CodeRange[]): Promise<ShardScan> {
    const sorted = [...ranges].sort((a, b) => a.begin - b.begin);
    const thread = await this.#take();
    try {
      const r = await thread.run(path, sorted);
      return { size: r.size, sha256: r.sha256, codeBytes: sorted.reduce((a, x) => a + (x.end - x.begin), 0), invalid: r.invalid };
    } finally {
      const next = this.#queue.shift();
      if (next !== undefined) next(thread);
      else this.#idle.push(thread);
    }
  }

  #take(): Promise<ScanThread> {
    const idle = this.#idle.pop();
    if (idle !== undefined) return Promise.resolve(idle);
    if (this.#all.length < this.#max) {
      scanModule ??= new WebAssembly.Module(WASM_BYTES);
      const t = new ScanThread(scanModule);
      this.#all.push(t);
      return Promise.resolve(t);
    }
    return new Promise((resolve) => this.#queue.push(resolve));
  }

  async close(): Promise<void> {
    await Promise.all(this.#all.map((t) => t.close()));
  }
}
