/**
 * One pass over a shard's bytes: its sha256 and a scan of the packed-code byte ranges for the invalid code 3.
 * Three things overlap: the next chunk's read (libuv thread pool), the sha256 of the current chunk (this
 * thread), and the code scan (a worker thread sharing the chunk ring), so the pass runs at about the rate of
 * sha256 alone. Independent of lib/pack: the code test is its own (scan-worker.mjs).
 */
import { createHash } from 'node:crypto';
import { open } from 'node:fs/promises';
import { Worker } from 'node:worker_threads';

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

const SLOTS = 4;
const CHUNK = 4 << 20;

/** A scanner thread with its chunk ring; reuse it for several files, then `close()`. */
export class ShardScanner {
  readonly #ring = new SharedArrayBuffer(SLOTS * CHUNK);
  readonly #worker: Worker;
  readonly #waiting = new Map<number, { resolve: (found: number[]) => void; reject: (e: Error) => void }>();
  #failed: Error | null = null;
  #nextId = 0;

  constructor() {
    this.#worker = new Worker(new URL('./scan-worker.mjs', import.meta.url), { workerData: { buffer: this.#ring } });
    this.#worker.on('message', (m: { id: number; found: number[] }) => {
      this.#waiting.get(m.id)?.resolve(m.found);
      this.#waiting.delete(m.id);
    });
    const fail = (e: Error): void => {
      this.#failed = e;
      for (const w of this.#waiting.values()) w.reject(e);
      this.#waiting.clear();
    };
    this.#worker.on('error', fail);
    this.#worker.on('exit', (code) => fail(new Error(`audit scanner thread exited (code ${code})`)));
  }

  /** Hashes the whole file and scans `ranges` (sorted or not, non-overlapping) for code 3. */
  async scan(path: string, ranges: readonly CodeRange[]): Promise<ShardScan> {
    const sorted = [...ranges].sort((a, b) => a.begin - b.begin);
    const handle = await open(path, 'r');
    try {
      const size = (await handle.stat()).size;
      const hash = createHash('sha256');
      const chunks = Math.ceil(size / CHUNK);
      const slotDone: Array<Promise<void>> = Array.from({ length: SLOTS }, () => Promise.resolve());
      const firstBad = new Map<number, number>(); // range index -> absolute file offset
      let cursor = 0; // first range that may intersect the current chunk

      const read = async (c: number): Promise<Uint8Array> => {
        const slot = c % SLOTS;
        await slotDone[slot];
        const len = Math.min(CHUNK, size - c * CHUNK);
        const view = new Uint8Array(this.#ring, slot * CHUNK, len);
        let done = 0;
        while (done < len) {
          const { bytesRead } = await handle.read(view, done, len - done, c * CHUNK + done);
          if (bytesRead === 0) throw new Error(`${path}: file shrank while being read (at byte ${c * CHUNK + done})`);
          done += bytesRead;
        }
        return view;
      };

      let next = chunks > 0 ? read(0) : null;
      for (let c = 0; c < chunks; c++) {
        const view = await next!;
        next = c + 1 < chunks ? read(c + 1) : null;
        hash.update(view);
        const pos = c * CHUNK;
        const end = pos + view.length;
        const segments: Array<[number, number]> = [];
        const owners: number[] = [];
        while (cursor < sorted.length && sorted[cursor]!.end <= pos) cursor++;
        for (let r = cursor; r < sorted.length && sorted[r]!.begin < end; r++) {
          const lo = Math.max(sorted[r]!.begin, pos);
          const hi = Math.min(sorted[r]!.end, end);
          if (hi > lo && !firstBad.has(r)) {
            segments.push([view.byteOffset + lo - pos, view.byteOffset + hi - pos]);
            owners.push(r);
          }
        }
        if (segments.length > 0) {
          const id = this.#nextId++;
          const slot = c % SLOTS;
          slotDone[slot] = new Promise<number[]>((resolve, reject) => {
            if (this.#failed) return reject(this.#failed);
            this.#waiting.set(id, { resolve, reject });
            this.#worker.postMessage({ id, segments });
          }).then((found) => {
            found.forEach((at, k) => {
              if (at >= 0 && !firstBad.has(owners[k]!)) firstBad.set(owners[k]!, pos + at - slot * CHUNK);
            });
          });
        }
      }
      await Promise.all(slotDone);
      const invalid: InvalidCode[] = [];
      for (const [r, at] of [...firstBad].sort((a, b) => a[1] - b[1])) {
        const byteValue = Buffer.alloc(1);
        await handle.read(byteValue, 0, 1, at);
        invalid.push({ tensor: sorted[r]!.tensor, byte: at - sorted[r]!.begin, value: byteValue[0]! });
      }
      const codeBytes = sorted.reduce((a, r) => a + (r.end - r.begin), 0);
      return { size, sha256: hash.digest('hex'), codeBytes, invalid };
    } finally {
      await handle.close();
    }
  }

  async close(): Promise<void> {
    await this.#worker.terminate();
  }
}
