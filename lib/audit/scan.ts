/**
 * One look at every byte of a shard: its sha256, and a scan of the packed-code byte ranges for the invalid
 * code 3. Two threads work on the same shard at once, each reading the file itself in small chunks that are
 * still in its core's cache when it uses them: one hashes the whole file, the other scans the code ranges
 * with a WebAssembly SIMD test (scan.wat). On two cores the pass takes about as long as the sha256 alone
 * (handing one thread's reads to the other costs more than reading twice: the bytes would cross cores).
 * Independent of lib/pack: the code test is its own (scan.wat, scan-worker.mjs).
 */
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

type Job = { op: 'hash'; path: string } | { op: 'scan'; path: string; ranges: CodeRange[] };
type Reply = { id: number; error?: string; sha256?: string; size?: number; invalid?: InvalidCode[] };

let scanModule: WebAssembly.Module | undefined;

/** One worker thread running jobs one at a time. */
class JobThread {
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

  run(job: Job): Promise<Reply> {
    return new Promise((resolve, reject) => {
      if (this.#failed) return reject(this.#failed);
      const id = this.#nextId++;
      this.#waiting.set(id, { resolve, reject });
      this.#worker.postMessage({ id, ...job });
    });
  }

  async close(): Promise<void> {
    this.#worker.removeAllListeners('exit');
    await this.#worker.terminate();
  }
}

/** The hashing and the scanning thread; reuse them for several files, then `close()`. */
export class ShardScanner {
  readonly #hasher: JobThread;
  readonly #scanner: JobThread;

  constructor() {
    scanModule ??= new WebAssembly.Module(WASM_BYTES);
    this.#hasher = new JobThread(scanModule);
    this.#scanner = new JobThread(scanModule);
  }

  /** Hashes the whole file and scans `ranges` (sorted or not, non-overlapping, within the file) for code 3. */
  async scan(path: string, ranges: readonly CodeRange[]): Promise<ShardScan> {
    const sorted = [...ranges].sort((a, b) => a.begin - b.begin);
    const [hashed, scanned] = await Promise.all([
      this.#hasher.run({ op: 'hash', path }),
      sorted.length > 0 ? this.#scanner.run({ op: 'scan', path, ranges: sorted }) : Promise.resolve({ id: -1, invalid: [] }),
    ]);
    const codeBytes = sorted.reduce((a, r) => a + (r.end - r.begin), 0);
    return { size: hashed.size!, sha256: hashed.sha256!, codeBytes, invalid: scanned.invalid! };
  }

  async close(): Promise<void> {
    await Promise.all([this.#hasher.close(), this.#scanner.close()]);
  }
}
