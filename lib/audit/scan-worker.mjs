// An audit thread (plain JavaScript so it starts under any loader: tsx, vitest, node). Jobs:
//   { op: 'hash', path }          -> { sha256, size } of the whole file
//   { op: 'scan', path, ranges }  -> { invalid }: per range (sorted [begin, end) byte ranges of packed codes),
//                                    the first byte holding the invalid code 0b11 in any of its 2-bit fields
// Both read the file in 256 KiB chunks, used while still in this core's cache. The scan reads straight into
// the WebAssembly memory of scan.wat, whose SIMD test clears whole 64-byte blocks; a chunk it flags, and the
// tail, are looked at byte by byte: a byte b holds a 0b11 field exactly when b & (b >> 1) & 0x55 is non-zero.
import { createHash } from 'node:crypto';
import { closeSync, openSync, readSync } from 'node:fs';
import { parentPort, workerData } from 'node:worker_threads';

const CHUNK = 256 * 1024;
const memory = new WebAssembly.Memory({ initial: CHUNK / 65536 });
const { anyInvalid } = new WebAssembly.Instance(workerData.module, { audit: { memory } }).exports;
const chunk = new Uint8Array(memory.buffer, 0, CHUNK);
const hashBuf = Buffer.allocUnsafe(CHUNK);

function firstInvalid(bytes, start, end) {
  for (let i = start; i < end; i++) {
    const b = bytes[i];
    if ((b & (b >>> 1) & 0x55) !== 0) return i;
  }
  return -1;
}

function hashFile(path) {
  const h = createHash('sha256');
  const fd = openSync(path, 'r');
  let size = 0;
  try {
    let n;
    while ((n = readSync(fd, hashBuf, 0, CHUNK, null)) > 0) {
      h.update(n === CHUNK ? hashBuf : hashBuf.subarray(0, n));
      size += n;
    }
  } finally {
    closeSync(fd);
  }
  return { sha256: h.digest('hex'), size };
}

function scanFile(path, ranges) {
  const invalid = [];
  const fd = openSync(path, 'r');
  try {
    for (const { tensor, begin, end } of ranges) {
      for (let pos = begin; pos < end; ) {
        const want = Math.min(CHUNK, end - pos);
        let got = 0;
        while (got < want) {
          const n = readSync(fd, chunk, got, want - got, pos + got);
          if (n === 0) throw new Error(`${path}: ends at byte ${pos + got}, inside the codes of ${tensor} (to byte ${end})`);
          got += n;
        }
        const bulk = want - (want % 64);
        const at = (bulk > 0 && anyInvalid(0, bulk) !== 0) ? firstInvalid(chunk, 0, bulk) : firstInvalid(chunk, bulk, want);
        if (at >= 0) {
          invalid.push({ tensor, byte: pos + at - begin, value: chunk[at] });
          break;
        }
        pos += want;
      }
    }
  } finally {
    closeSync(fd);
  }
  return { invalid };
}

parentPort.on('message', (job) => {
  try {
    const result = job.op === 'hash' ? hashFile(job.path) : scanFile(job.path, job.ranges);
    parentPort.postMessage({ id: job.id, ...result });
  } catch (e) {
    parentPort.postMessage({ id: job.id, error: String((e && e.message) || e) });
  }
});
